"""
The citation verifier: checks that the answer's `[S#]` markers point at passages that support what they cite
(and do not contradict it), removes the sentences that fail, and builds the structured citation list of the
response.
"""

import re
import time
from typing import Any

import numpy as np
from haystack import Document, component

from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from gatehouse.components.guardrails.sanitising import citation_url, plain_text
from gatehouse.components.citation_markers import DEFAULT_CITATION_PATTERN, find_markers, rewrite_markers, strip_markers
from gatehouse.components.printable import printable
from gatehouse.components.terms import content_words, numbers, overlap, stem
from gatehouse.components.text_units import (
    DEFAULT_ABBREVIATIONS,
    Unit,
    normalize_space,
    split_units,
    strip_heading_markers,
    strip_list_marker,
)

#: Words and phrases that negate what follows them; `n't` matches the contracted form ("doesn't", "can't").
DEFAULT_NEGATION_CUES: tuple[str, ...] = (
    "not", "no", "never", "n't", "cannot", "without", "none", "neither", "nor", "nothing", "fail to", "fails to",
    "failed to", "unable to", "lack", "lacks", "lacked", "absence of",
)

#: Pairs of opposite word groups; a sentence using one side where its evidence uses the other contradicts it.
DEFAULT_ANTONYMS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("always",), ("never",)),
    (("include", "included", "includes"), ("exclude", "excluded", "excludes")),
    (("increase", "increased", "increases", "higher", "more", "greater", "raise", "raises", "rise", "rises"),
     ("decrease", "decreased", "decreases", "lower", "less", "fewer", "reduce", "reduced", "reduces", "drop")),
    (("enable", "enabled", "enables"), ("disable", "disabled", "disables")),
    (("before",), ("after",)),
    (("required", "mandatory"), ("optional",)),
    (("allowed", "permitted"), ("forbidden", "prohibited")),
    (("minimum",), ("maximum",)),
)


_NUMBER_WITH_UNIT = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s*(%|[^\W\d_]+)?")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_CUE_TOKEN = re.compile(r"\w+?(?=n['’]t\b)|n['’]t\b|\w+", re.IGNORECASE)


@component
class CitationVerifier:
    """
    Verifies an answer's citations against the passages and builds `state["citations"]`.

    What it does:
    - Parses the markers `[S1]`, `[S1, S3]`, `[S1][S2]` of `state["answer"]` and maps them to the passages by
      `meta["source_id"]`. Ids that point nowhere are removed from the answer and recorded as
      `guardrail_actions` "removed_invalid_citation:S9" (once per id).
    - Splits the answer into sentences (list items, code blocks and tables count as one; headings are ignored) and
      scores every sentence that carries a valid marker: the support score is the best, over the sentences of
      the passages it cites (and each cited passage as a whole), of
      `embedding_weight * cosine + lexical_weight * containment`, where containment is the share of the
      sentence's content words (stemmed, stopwords removed) found in the passage sentence. A sentence copied
      verbatim scores 1.0; a sentence citing an unrelated passage scores near 0. When the sentence states a number
      that the cited passages do not contain, or writes a `code name` they never write, its score is multiplied by
      `unmatched_number_penalty`.
      A sentence is supported when its score is at least `support_threshold` and it is not contradicted.
    - Detects contradiction (`detect_contradictions`), which similarity alone cannot see ("Keys do not expire" is
      as close to "Keys expire" as a paraphrase): the claim is aligned with its `alignment_top_k` best-matching
      evidence sentences and contradicts one of them when
      - its polarity differs: the negation cues (`negation_cues`: not, no, never, n't, without, fails to...)
        and opposite words (`antonyms`: increase/decrease, always/never, enable/disable...) that bear on the
        shared content, i.e. have a word of the other sentence within `cue_window` words, flip the meaning an
        odd number of times, counting both sentences (so "does not increase" agrees with "decreases"), or
      - it states a number the cited passages do not contain while the evidence gives a different number of the
        same unit ("48 hours" against "24 hours").
      A contradicted sentence is unsupported whatever its score and is reported with its cues.
    - With `remove_unsupported`, unsupported and contradicted sentences are removed from the answer together with
      their markers; a citation that no kept sentence uses disappears from `citations`. The status becomes
      `partial`, or `fallback` with `fallback_message` when no supported claim remains. Removed sentences are
      listed in `validation.unsupported_sentences`; a contradicted one is also recorded as a `guardrail_actions`
      entry "removed_contradicted_sentence:<sentence>" (an unsupported one as "removed_unsupported_sentence:...").
    - With `reattribute`, a claim its own citation does not support (a low score, or a number the cited passage
      does not give), or a claim with no valid marker, is scored against every other passage; when one scores at
      least `reattribute_threshold` and does not contradict it, the sentence keeps its words and its marker is
      rewritten to that passage (`[S1]` -> `[S3]`, or `[S3]` added), recorded as a `guardrail_actions` entry
      "reattributed_citation:S1->S3:<sentence>" and in the verdict's `reattributed_from`. A claim that negates or
      opposes its cited passage is never re-attributed. The citations then point at what says the sentence, not
      at what the model named.
    - A sentence without a valid marker is unsupported, unless it is connective text: no marker at all (not even
      an invalid one), at most `connective_max_words` words and no digits ("Here are the steps:", "In short:").
      Connective sentences are neither supported nor unsupported claims: they are left out of `supported_ratio`
      but counted as uncited sentences in `citation_coverage`.
    - Reports `validation.unsupported_sentences`, `citation_coverage` (share of the answer's sentences that carry a
      valid, supporting citation), and `support = {"supported", "supported_ratio", "scores"}` where
      `supported_ratio` is the share of claims (non-connective sentences) that are supported, and `supported` is
      False below `min_supported_ratio`; the output guardrails use it to block the answer. Each entry of `scores`
      says whether the sentence was `contradicted` and by which `cues` (`negation`, `antonym:<word>`,
      `number:<n> <unit>`). Coverage and ratio describe the answer as written, before any removal.
    - Builds `citations`: one entry per passage the answer cites, in order of first use, with display text
      "<title> › <section>", a snippet, a URL that names the section (`url#section_id`; document-level when
      there is no section; `kb://<kb>/<source>#<section_id>` when the passage has no URL), `chunk_id`, `source`,
      `kb` and `confidence` (the best support score of the sentences citing it).

    With no passages (direct answers, refusals) the state passes through with only the path step added, except
    that any marker in the answer is removed and recorded since it cannot point anywhere. States whose `status`
    is in `skip_statuses` (the fallback message) pass through likewise.

    Usage example:
    ```python
    from haystack import Document
    from gatehouse.components.validators.citation_verifier import CitationVerifier
    from gatehouse.components.state import new_state

    passage = Document(content="API keys expire after 90 days.",
                       meta={"source_id": "S1", "title": "API keys", "section": "Expiry", "section_id": "expiry",
                             "url": "https://docs.example.com/api-keys", "kb": "docs", "source": "api-keys.md"})
    state = new_state("When do keys expire?", passages=[passage], answer="API keys expire after 90 days. [S1] [S9]")
    result = CitationVerifier().run(state=state)["state"]
    result["answer"]                  # "API keys expire after 90 days. [S1]"
    result["citations"][0]["url"]     # "https://docs.example.com/api-keys#expiry"
    result["support"]["supported"]    # True

    state = new_state("When do keys expire?", passages=[passage],
                      answer="API keys expire after 90 days. [S1] API keys never expire. [S1]")
    result = CitationVerifier().run(state=state)["state"]
    result["answer"]                  # "API keys expire after 90 days. [S1]"
    result["status"]                  # "partial"
    result["validation"]["guardrail_actions"]   # ["removed_contradicted_sentence:API keys never expire."]
    ```
    """

    def __init__(
        self,
        *,
        support_threshold: float = 0.55,
        embedding_weight: float = 0.5,
        lexical_weight: float = 0.5,
        min_supported_ratio: float = 0.5,
        unmatched_number_penalty: float = 0.5,
        detect_contradictions: bool = True,
        negation_cues: list[str] | None = None,
        antonyms: list[list[list[str]]] | None = None,
        cue_window: int = 5,
        alignment_top_k: int = 1,
        remove_unsupported: bool = True,
        reattribute: bool = False,
        reattribute_threshold: float = 0.7,
        fallback_message: str = FALLBACK_MESSAGE,
        connective_max_words: int = 6,
        snippet_chars: int = 200,
        citation_text_separator: str = " › ",
        url_template: str = "kb://{kb}/{source}",
        fallback_kb: str = "context",
        skip_statuses: list[str] | None = None,
        citation_pattern: str = DEFAULT_CITATION_PATTERN,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
        stopwords: list[str] | None = None,
        abbreviations: list[str] | None = None,
    ) -> None:
        """
        Create the verifier.

        :param support_threshold: Lowest support score (0..1) of a supported sentence.
        :param embedding_weight: Weight of the embedding cosine similarity in the support score.
        :param lexical_weight: Weight of the lexical containment in the support score.
        :param min_supported_ratio: Share of supported claims below which `support.supported` is False.
        :param unmatched_number_penalty: Factor applied to the score of a sentence stating a number, or a `code name`,
            absent from the passages it cites (1.0 disables the check).
        :param detect_contradictions: Check claims for negation flips, opposite words and different numbers.
        :param negation_cues: Words and phrases that negate what follows; None uses `DEFAULT_NEGATION_CUES`.
        :param antonyms: Pairs of opposite word groups, `[[["increase", "higher"], ["decrease", "lower"]], ...]`,
            matched by stem; None uses `DEFAULT_ANTONYMS`.
        :param cue_window: A cue bears on the shared content when a content word of the other sentence lies within
            this many words after a negation cue, or on either side of an opposite word.
        :param alignment_top_k: Evidence sentences (the best-matching ones) a claim is checked against.
        :param remove_unsupported: Remove unsupported and contradicted sentences (with their citations) from the
            answer; the answer becomes `fallback_message` when no supported claim remains.
        :param reattribute: Point an unsupported or unmarked claim at another passage that supports it instead of
            removing it.
        :param reattribute_threshold: Lowest support score of the passage a claim is re-attributed to (above
            `support_threshold`: the claim's words were not written for that passage).
        :param fallback_message: The answer when every claim was removed.
        :param connective_max_words: Unmarked sentences of at most this many words and no digits are connective text.
        :param snippet_chars: Length of a citation's snippet.
        :param citation_text_separator: Separator between the document title and the section in citation text.
        :param url_template: URL of a passage without `meta["url"]`; `{kb}` and `{source}` are filled in and
            `#<section_id>` is appended when known.
        :param fallback_kb: The `{kb}` of a passage without `meta["kb"]` (e.g. constrained-context text).
        :param skip_statuses: Statuses whose answers are not verified; None means `["fallback"]`.
        :param citation_pattern: Regex of a citation marker whose group 1 holds the ids.
        :param embedding_model: Embedding model; None uses the configured default.
        :param cache_dir: Embedding cache directory; None uses the configured default, `"off"` disables it.
        :param stopwords: Stopwords ignored by the lexical containment; None uses the built-in English list.
        :param abbreviations: Words whose trailing period does not end a sentence; None uses the built-in list.
        """
        self.support_threshold = support_threshold
        self.embedding_weight = embedding_weight
        self.lexical_weight = lexical_weight
        self.min_supported_ratio = min_supported_ratio
        self.unmatched_number_penalty = unmatched_number_penalty
        self.detect_contradictions = detect_contradictions
        self.negation_cues = negation_cues
        self.antonyms = antonyms
        self.cue_window = cue_window
        self.alignment_top_k = alignment_top_k
        self.remove_unsupported = remove_unsupported
        self.reattribute = reattribute
        self.reattribute_threshold = reattribute_threshold
        self.fallback_message = fallback_message
        self.connective_max_words = connective_max_words
        self.snippet_chars = snippet_chars
        self.citation_text_separator = citation_text_separator
        self.url_template = url_template
        self.fallback_kb = fallback_kb
        self.skip_statuses = skip_statuses
        self.citation_pattern = citation_pattern
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.stopwords = stopwords
        self.abbreviations = abbreviations
        self._backend: Any = None
        cues = DEFAULT_NEGATION_CUES if negation_cues is None else negation_cues
        self._negations = [tuple(_cue_tokens(cue)) for cue in cues if _cue_tokens(cue)]
        pairs = DEFAULT_ANTONYMS if antonyms is None else antonyms
        self._antonyms = [({stem(w.lower()) for w in a}, {stem(w.lower()) for w in b}) for a, b in pairs]

    def warm_up(self) -> None:
        """Load the embedding model."""
        if self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.cache_dir)

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Verify the citations of `state["answer"]` against `state["passages"]`.

        :param state: The request state; reads `answer`, `passages` and `status`.
        :returns:
            - `state`: the state with the cleaned `answer`, `citations`, `citation_coverage`, `support` and the
              validation records; unchanged but for the path when there is nothing to verify.
        """
        started = time.perf_counter()
        answer = str(state.get("answer") or "")
        passages = list(state.get("passages") or [])
        skip = ["fallback"] if self.skip_statuses is None else self.skip_statuses

        if not passages or state.get("status") in skip:
            valid: set[str] = {self._source_id(p, i) for i, p in enumerate(passages)}
            cleaned, removed = self._clean(answer, valid)
            updates = {"answer": cleaned} if removed else {}
            new_state = advance(state, stage="verify", started=started, steps=["verify_citations"], **updates)
            if removed:
                new_state = with_validation(
                    new_state, "guardrail_actions", *(f"removed_invalid_citation:{i}" for i in removed)
                )
            return {"state": new_state}

        by_id = self._by_id(passages)
        cleaned, removed = self._clean(answer, set(by_id))

        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        sentences = self.sentence_verdicts(self.units(answer), passages, question)
        claims = [s for s in sentences if not s["connective"]]

        supported_count = sum(1 for s in claims if s["supported"])
        coverage = supported_count / len(sentences) if sentences else 0.0
        ratio = supported_count / len(claims) if claims else 0.0
        support = {
            "supported": bool(claims) and ratio >= self.min_supported_ratio,
            "supported_ratio": round(ratio, 3),
            "scores": [
                {
                    "sentence": s["text"],
                    "sources": s["ids"],
                    "score": round(s["score"], 3),
                    "supported": s["supported"],
                    "connective": s["connective"],
                    "contradicted": bool(s["cues"]),
                    "cues": s["cues"],
                    **({"reattributed_from": s["reattributed_from"]} if "reattributed_from" in s else {}),
                }
                for s in sentences
            ],
        }
        failed = [s for s in claims if not s["supported"]]
        dropped = [s for s in sentences if not self.keeps(s)]
        reattributed = [s for s in claims if "reattributed_from" in s]
        cleaned = self._reattributed(cleaned, reattributed, set(by_id))
        updates: dict[str, Any] = {"answer": cleaned}
        actions = [f"removed_invalid_citation:{i}" for i in removed]
        actions += [f"reattributed_citation:{','.join(s['reattributed_from']) or 'none'}->{s['ids'][0]}:{s['text']}"
                    for s in reattributed]
        if dropped:
            actions.extend(
                f"removed_{'contradicted' if s['cues'] else 'unsupported'}_sentence:{s['text']}" for s in dropped
            )
            if supported_count:
                updates.update(answer=self._remove(cleaned, dropped, set(by_id)), status="partial")
            else:
                updates.update(answer=self.fallback_message, status="fallback")
                actions.append("fallback:no_supported_sentence")
        kept = [s for s in claims if self.keeps(s)]
        citations = [] if updates.get("status") == "fallback" else self._citations(updates["answer"], by_id, kept)
        actions += [f"dropped_unsafe_url:{c['id']}" for c in citations if c["url"] != self._url(by_id[c["id"]])]
        new_state = advance(
            state,
            stage="verify",
            started=started,
            steps=["verify_citations"],
            citations=citations,
            citation_coverage=round(coverage, 3),
            support=support,
            **updates,
        )
        if actions:
            new_state = with_validation(new_state, "guardrail_actions", *actions)
        if failed:
            new_state = with_validation(new_state, "unsupported_sentences", *(s["text"] for s in failed))
        return {"state": new_state}

    def units(self, answer: str) -> list[Unit]:
        """
        The answer split as the verifier reads it: sentences, list items, code blocks, tables and headings.

        :param answer: Markdown or plain text.
        :returns: The units in reading order.
        """
        abbreviations = DEFAULT_ABBREVIATIONS if self.abbreviations is None else self.abbreviations
        return split_units(answer, abbreviations=abbreviations, citation_pattern=self.citation_pattern)

    def sentence_verdicts(self, units: list[Unit], passages: list[Document], question: str = "") -> list[dict[str, Any]]:
        """
        The per-sentence decision, the one `run` makes for every sentence of the whole answer; the chat stream makes
        it for each sentence as soon as the model has finished writing it, so both keep and drop the same sentences.

        Each unit (headings are skipped) becomes `{"text", "claim", "unit", "ids", "connective", "score",
        "supported", "cues"}`: its valid source ids, whether it is connective text, its support score, the cues by
        which it contradicts its evidence and whether it is supported. A unit's decision depends on that unit and
        the passages only, never on the other sentences.

        :param units: Units of `units(answer)`, all of them or any part.
        :param passages: The passages the answer may cite (`meta["source_id"]`, else `S<position>`).
        :param question: The question answered: a negation the question itself makes ("if I don't set a limit") is
            the user's premise, not a claim: negations on those words count on neither side.
        :returns: One verdict per sentence; `keeps(verdict)` says whether it stays in the answer.
        """
        by_id = self._by_id(passages)
        sentences = self._sentences(units, set(by_id))
        premise = self._negated_words(question)
        self._score_claims([s for s in sentences if not s["connective"] and s["ids"]], by_id, premise)
        if self.reattribute:
            self._reattribute([s for s in sentences if not s["connective"] and not s["supported"]
                               and all(cue.startswith("number:") for cue in s["cues"])], by_id, premise)
        return sentences

    def _reattribute(self, claims: list[dict[str, Any]], by_id: dict[str, Document], premise: set[str]) -> None:
        """Point each claim at the passage that supports it best, when one does (see the class docstring)."""
        pairs = [(claim, {**claim, "ids": [source_id], "cues": []})
                 for claim in claims for source_id in by_id if source_id not in claim["ids"]]
        self._score_claims([candidate for _, candidate in pairs], by_id, premise)
        for claim in claims:
            supporting = [c for owner, c in pairs if owner is claim
                          and not c["cues"] and c["score"] >= self.reattribute_threshold]
            if not supporting:
                continue
            best = max(supporting, key=lambda c: c["score"])
            marker = f"[{best['ids'][0]}]"
            unit = rewrite_markers(claim["unit"], lambda _ids: [], self.citation_pattern).rstrip()
            claim.update(reattributed_from=claim["ids"], ids=best["ids"], score=best["score"], supported=True, cues=[],
                         original_unit=claim["unit"], unit=f"{unit} {marker}")

    def keeps(self, verdict: dict[str, Any]) -> bool:
        """Whether a sentence of `sentence_verdicts` stays in the answer: connective text and supported claims do;
        unsupported and contradicted claims do only without `remove_unsupported`."""
        return verdict["connective"] or verdict["supported"] or not self.remove_unsupported

    def clean_markers(self, text: str, passages: list[Document]) -> str:
        """
        The text with the marker ids that point at no passage removed, as `run` removes them from the answer.

        :param text: An answer or a part of it.
        :param passages: The passages the answer may cite.
        :returns: The cleaned text.
        """
        return self._clean(text, set(self._by_id(passages)))[0]

    def citations_of(self, text: str, passages: list[Document], verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """
        The structured citations of a verified text, in order of first use, as `run` builds `state["citations"]`.

        :param text: Verified text with `[S#]` markers.
        :param passages: The passages the markers point at.
        :param verdicts: The verdicts of the text's sentences (each citation's `confidence` is their best score).
        :returns: One citation per passage cited.
        """
        return self._citations(text, self._by_id(passages), [v for v in verdicts if not v["connective"]])

    def _by_id(self, passages: list[Document]) -> dict[str, Document]:
        by_id: dict[str, Document] = {}
        for index, passage in enumerate(passages):
            by_id.setdefault(self._source_id(passage, index), passage)
        return by_id

    def _reattributed(self, answer: str, sentences: list[dict[str, Any]], valid: set[str]) -> str:
        """The answer with each re-attributed sentence's markers rewritten (its `unit` in place of the original)."""
        for sentence in sentences:
            unit, _ = self._clean(sentence["original_unit"], valid)
            answer = re.sub(_loose(unit), lambda _match, new=sentence["unit"]: new, answer, count=1)
        return answer

    def _remove(self, answer: str, failed: list[dict[str, Any]], valid: set[str]) -> str:
        """The answer without the failed sentences (and their markers); emptied lines and paragraphs close up."""
        for sentence in failed:
            unit, _ = self._clean(sentence["unit"], valid)
            answer = re.sub(r"[ \t]*" + _loose(unit) + r"[ \t]*", " ", answer, count=1)
        lines = [line.strip(" \t") if line.strip() else "" for line in answer.splitlines()]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()

    @staticmethod
    def _source_id(passage: Document, index: int) -> str:
        return str((passage.meta or {}).get("source_id") or f"S{index + 1}").upper()

    def _clean(self, answer: str, valid: set[str]) -> tuple[str, list[str]]:
        """Remove the marker ids that point nowhere; returns the new answer and the removed ids (first use order)."""
        removed: list[str] = []

        def keep(ids: list[str]) -> list[str]:
            kept: list[str] = []
            for marker_id in ids:
                if marker_id in valid:
                    if marker_id not in kept:
                        kept.append(marker_id)
                elif marker_id not in removed:
                    removed.append(marker_id)
            return kept

        cleaned = rewrite_markers(answer, keep, self.citation_pattern)
        return (cleaned if removed else answer), removed

    def _sentences(self, units: list[Unit], valid: set[str]) -> list[dict[str, Any]]:
        """The units' sentences with their valid ids; a sentence that had any marker, even an invalid one, is
        a claim, never connective text."""
        sentences: list[dict[str, Any]] = []
        for unit in units:
            if unit.kind == "heading":
                continue
            ids: list[str] = []
            markers = find_markers(unit.text, self.citation_pattern)
            for _, _, marker_ids in markers:
                ids.extend(i for i in marker_ids if i in valid and i not in ids)
            text = strip_markers(unit.text, self.citation_pattern)
            claim = strip_heading_markers(strip_list_marker(text))
            if not claim:
                continue
            words = claim.split()
            connective = (
                not markers
                and len(words) <= self.connective_max_words
                and not any(ch.isdigit() for ch in claim)
            )
            sentences.append(
                {"text": text, "claim": claim, "unit": unit.text, "ids": ids, "connective": connective,
                 "score": 0.0, "supported": False, "cues": []}
            )
        return sentences

    def _score_claims(self, claims: list[dict[str, Any]], by_id: dict[str, Document], premise: set[str]) -> None:
        if not claims:
            return
        self.warm_up()
        abbreviations = DEFAULT_ABBREVIATIONS if self.abbreviations is None else self.abbreviations
        cited = list(dict.fromkeys(i for claim in claims for i in claim["ids"]))
        evidence: dict[str, list[str]] = {}
        for source_id in cited:
            content = by_id[source_id].content or ""
            meta = by_id[source_id].meta or {}
            # What the passage says includes the headings it sits under ("PORT" over "- Default: 1416").
            headings = [str(h) for h in (meta.get("heading_path") or [meta.get("section")]) if h]
            pieces = [
                strip_heading_markers(strip_list_marker(u.text))
                for u in split_units(content, abbreviations=abbreviations, citation_pattern=self.citation_pattern)
            ]
            evidence[source_id] = list(dict.fromkeys([p for p in pieces + headings if p])) + [normalize_space(content)]
        texts = list(dict.fromkeys([c["claim"] for c in claims] + [t for ts in evidence.values() for t in ts]))
        vectors = dict(zip(texts, self._backend.embed(texts)))
        words = {t: content_words(t, self.stopwords) for t in texts}
        for claim in claims:
            claim_vector = vectors[claim["claim"]]
            aligned: list[tuple[float, str]] = []
            for source_id in claim["ids"]:
                for index, piece in enumerate(evidence[source_id]):
                    cosine = float(np.clip(claim_vector @ vectors[piece], 0.0, 1.0))
                    containment = overlap(words[claim["claim"]], words[piece])
                    pair = self.embedding_weight * cosine + self.lexical_weight * containment
                    aligned.append((pair, piece if index < len(evidence[source_id]) - 1 else ""))
            best = max(pair for pair, _ in aligned)
            available = set().union(*(numbers(" ".join(evidence[i])) for i in claim["ids"]))
            stated = numbers(claim["claim"])
            if stated - available:
                best *= self.unmatched_number_penalty
            cited_text = " ".join(evidence[i][-1] for i in claim["ids"])
            if any(name not in cited_text for name in _CODE_SPAN.findall(claim["claim"])):
                best *= self.unmatched_number_penalty  # a `name` the passage never writes ("TimeoutError")
            if self.detect_contradictions:
                sentences = [piece for _, piece in sorted(aligned, key=lambda a: -a[0]) if piece]
                claim["cues"] = self._contradiction(claim["claim"], sentences[: self.alignment_top_k], available,
                                                    premise)
            claim["score"] = min(1.0, best)
            claim["supported"] = claim["score"] >= self.support_threshold and not claim["cues"]

    def _contradiction(self, claim: str, aligned: list[str], available: set[str], premise: set[str]) -> list[str]:
        """The cues by which `claim` contradicts one of its aligned evidence sentences; empty when it does not."""
        for sentence in aligned:
            flips = self._polarity_cues(claim, sentence, premise)
            if len(flips) % 2:
                return flips
            for number, unit in _numbers_with_units(claim):
                if number not in available and any(
                    u == unit and n != number for n, u in _numbers_with_units(sentence)
                ):
                    return [f"number:{number} {unit}"]
        return []

    def _polarity_cues(self, claim: str, sentence: str, premise: set[str] | None = None) -> list[str]:
        """Negations (in either sentence) and opposite words that bear on the content the two sentences share."""
        claim_tokens, sentence_tokens = _cue_tokens(claim), _cue_tokens(sentence)
        cues = [f"negation:{cue}" for cue in self._negations_on(claim_tokens, sentence, premise)]
        cues += [f"negation:{cue}" for cue in self._negations_on(sentence_tokens, claim, premise)]
        claim_hits, sentence_hits = self._antonym_hits(claim_tokens), self._antonym_hits(sentence_tokens)
        for pair, side, word, context in claim_hits:
            near = [(s, w) for p, s, w, c in sentence_hits if p == pair and c & context]
            opposite = [w for s, w in near if s != side]
            if opposite and all(s != side for s, _ in near):
                cues.append(f"antonym:{word}/{opposite[0]}")
        return cues

    def _negations_on(self, tokens: list[str], other: str, premise: set[str] | None = None) -> list[str]:
        """
        The negation cues of `tokens` followed, within `cue_window` words, by a content word of `other`; a cue whose
        words are among `premise` (what the question itself negates) is left out.
        """
        shared = content_words(other, self.stopwords)
        found = []
        for start in range(len(tokens)):
            for cue in self._negations:
                end = start + len(cue)
                window = self._content(tokens[end : end + self.cue_window])
                if tuple(tokens[start:end]) == cue and window & shared and not (premise and window & premise):
                    found.append(" ".join(cue))
        return found

    def _negated_words(self, question: str) -> set[str]:
        """The content words the question's own negations bear on ("if I don't pass any *limits*")."""
        tokens = _cue_tokens(question or "")
        return {word for start in range(len(tokens)) for cue in self._negations
                if tuple(tokens[start : start + len(cue)]) == cue
                for word in self._content(tokens[start + len(cue) : start + len(cue) + self.cue_window])}

    def _antonym_hits(self, tokens: list[str]) -> list[tuple[int, int, str, set[str]]]:
        """`(pair, side, word, content words within cue_window on either side)` per opposite word in `tokens`;
        a word that is also a negation cue ("never") counts once, as a negation."""
        hits = []
        for position, token in enumerate(tokens):
            if (token,) in self._negations:
                continue
            stemmed = stem(token)
            for pair, (first, second) in enumerate(self._antonyms):
                for side, group in enumerate((first, second)):
                    if stemmed in group:
                        context = tokens[max(0, position - self.cue_window) : position] + tokens[
                            position + 1 : position + 1 + self.cue_window
                        ]
                        hits.append((pair, side, token, self._content(context)))
        return hits

    def _content(self, tokens: list[str]) -> set[str]:
        return content_words(" ".join(t for t in tokens if t != "n't"), self.stopwords)

    def _citations(
        self, answer: str, by_id: dict[str, Document], claims: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        order = list(dict.fromkeys(i for _, _, ids in find_markers(answer, self.citation_pattern) for i in ids))
        citations = []
        for source_id in order:
            passage = by_id[source_id]
            source = (passage.meta or {}).get("source")
            scores = [c["score"] for c in claims if source_id in c["ids"]]
            citations.append(
                {
                    "id": source_id,
                    "text": normalize_space(plain_text(self._display_text(passage, source_id))),
                    "snippet": self._snippet(plain_text(passage.content or "")),
                    "url": citation_url(self._url(passage)) or self._kb_url(passage),
                    "chunk_id": passage.id,
                    "source": source if source is None else plain_text(str(source)),
                    "kb": (passage.meta or {}).get("kb"),
                    "confidence": round(max(scores), 3) if scores else 0.0,
                }
            )
        return citations

    def _display_text(self, passage: Document, source_id: str) -> str:
        meta = passage.meta or {}
        title = meta.get("title") or meta.get("source") or source_id
        section = meta.get("section")
        if section and str(section).strip() and str(section).strip() != str(title).strip():
            return f"{title}{self.citation_text_separator}{section}"
        return str(title)

    def _snippet(self, content: str) -> str:
        # Headings repeat the citation's display text, so the snippet starts at the passage's body when it has one.
        body = [u.text for u in split_units(content, citation_pattern=self.citation_pattern) if u.kind != "heading"]
        text = normalize_space(" ".join(body) if body else strip_heading_markers(content))
        if len(text) <= self.snippet_chars:
            return text
        cut = text[: self.snippet_chars]
        if " " in cut:
            cut = cut[: cut.rfind(" ")]
        return cut.rstrip(" ,;:") + "…"

    def _url(self, passage: Document) -> str:
        meta = passage.meta or {}
        section_id = meta.get("section_id")
        anchor = f"#{section_id}" if section_id else ""
        url = meta.get("url")
        if url:
            return str(url) if "#" in str(url) or not anchor else f"{url}{anchor}"
        return self._kb_url(passage)

    def _kb_url(self, passage: Document) -> str:
        """The passage's link in its knowledge base (`url_template`): where a citation points without a page URL,
        or when the page's URL is not a safe link."""
        meta = passage.meta or {}
        anchor = f"#{meta['section_id']}" if meta.get("section_id") else ""
        kb = meta.get("kb") or self.fallback_kb
        source = meta.get("source") or meta.get("doc_id") or passage.id
        return printable(self.url_template.format(kb=kb, source=source) + anchor)


def _loose(text: str) -> str:
    """A regex matching `text` however its words are spaced or broken across lines."""
    return r"\s*".join(re.escape(word) for word in text.split())


def _cue_tokens(text: str) -> list[str]:
    """Lower-cased words with the contraction `n't` as a word of its own ("doesn't" -> "does", "n't")."""
    return [t.lower().replace("’", "'") for t in _CUE_TOKEN.findall(text or "")]


def _numbers_with_units(text: str) -> set[tuple[str, str]]:
    """The numbers of a text with the unit word that follows each (`("90", "days")`, `("5", "%")`); numbers
    without a unit are left out since nothing says what they count."""
    found = set()
    for match in _NUMBER_WITH_UNIT.finditer(text or ""):
        if match.group(2):
            found.add((match.group(1).replace(",", "").rstrip("."), stem(match.group(2).lower())))
    return found
