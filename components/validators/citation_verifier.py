"""
The citation verifier: checks that the answer's `[S#]` markers point at passages that support what they cite
(and do not contradict it), removes the sentences that fail, and builds the structured citation list of the
response. Its helpers: `claim_alignment` (the support score), `contradiction` (negation cues, opposite words and
numbers) and `citation_list` (the citation entries).
"""

import time
from typing import Any, ClassVar

from haystack import Document, component

from gatehouse.components.generators.reply_stream import ReplyStream
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance, with_validation
from gatehouse.components.citation_markers import DEFAULT_CITATION_PATTERN, find_markers, rewrite_markers, strip_markers
from gatehouse.components.text_units import (
    DEFAULT_ABBREVIATIONS,
    Unit,
    split_units,
    strip_heading_markers,
    strip_list_marker,
)
from gatehouse.components.validators.answer_edits import (
    passages_by_id,
    with_reattributed,
    without_invalid_markers,
    without_sentences,
)
from gatehouse.components.validators.citation_list import CITATION_DEFAULTS, CitationList
from gatehouse.components.validators.claim_alignment import SCORING_DEFAULTS, ClaimAligner
from gatehouse.components.validators.contradiction import CONTRADICTION_DEFAULTS
from gatehouse.components.validators.verified_reply import VerifiedReply

#: What counts as supported (the `support` settings and their defaults): a sentence whose support score is at least
#: `threshold` (and that is not contradicted), and an answer whose share of supported claims is at least `min_ratio`.
SUPPORT_DEFAULTS: dict[str, Any] = {"threshold": 0.55, "min_ratio": 0.5}

#: The `reading` settings and their defaults: the regex of a citation marker (group 1 holds the ids), the words whose
#: trailing period ends no sentence and the stopwords (None: the built-in lists), and the most words of connective
#: text.
READING_DEFAULTS: dict[str, Any] = {
    "citation_pattern": DEFAULT_CITATION_PATTERN, "abbreviations": None, "stopwords": None, "connective_max_words": 6,
}

#: Where the settings that moved into a group went (old name -> new place).
MOVED_SETTINGS: dict[str, str] = {
    "support_threshold": "support.threshold",
    "min_supported_ratio": "support.min_ratio",
    **{name: f"scoring.{name}" for name in SCORING_DEFAULTS},
    "detect_contradictions": "contradictions.enabled",
    **{name: f"contradictions.{name}" for name in CONTRADICTION_DEFAULTS if name != "enabled"},
    "citation_text_separator": "citations.text_separator",
    **{name: f"citations.{name}" for name in CITATION_DEFAULTS if name != "text_separator"},
    **{name: f"reading.{name}" for name in READING_DEFAULTS},
}


@component
class CitationVerifier(MovedSettings):
    """
    Verifies an answer's citations against the passages and builds `state["citations"]`.

    What it does:
    - Parses the markers `[S1]`, `[S1, S3]`, `[S1][S2]` of `state["answer"]` and maps them to the passages by
      `meta["source_id"]`. Ids that point nowhere are removed from the answer and recorded as
      `guardrail_actions` "removed_invalid_citation:S9" (once per id).
    - Splits the answer into sentences (list items, code blocks and tables count as one; headings are ignored) and
      scores every sentence that carries a valid marker against the passages it cites (`claim_alignment`: embedding
      similarity and word containment, `scoring.embedding_weight` and `scoring.lexical_weight`, times
      `scoring.unmatched_number_penalty` for a number or `code name` the passages never give). A sentence copied
      verbatim scores 1.0; a sentence citing an unrelated passage scores near 0. A sentence is supported when its
      score is at least `support.threshold` and it is not contradicted.
    - Detects contradiction (`contradictions.enabled`; the `contradiction` module), which similarity alone cannot see
      ("Keys do not expire" is as close to "Keys expire" as a paraphrase): the claim is aligned with its
      `contradictions.alignment_top_k` best-matching evidence sentences and contradicts one of them when the
      negation cues and opposite words bearing on the shared content flip its meaning an odd number of times, or
      when it states a number the evidence gives differently ("48 hours" against "24 hours"). A contradicted
      sentence is unsupported whatever its score and is reported with its cues.
    - With `remove_unsupported`, unsupported and contradicted sentences are removed from the answer together with
      their markers; a citation that no kept sentence uses disappears from `citations`. The status becomes
      `partial`, or `fallback` with `fallback_message` when no supported claim remains. Removed sentences are
      listed in `validation.unsupported_sentences`; a contradicted one is also recorded as a `guardrail_actions`
      entry "removed_contradicted_sentence:<sentence>" (an unsupported one as "removed_unsupported_sentence:...").
    - With `reattribute`, a claim its own citation does not support (a low score, or a number the cited passage
      does not give), or a claim with no valid marker, is scored against every other passage; when one scores at
      least `scoring.reattribute_threshold` and does not contradict it, the sentence keeps its words and its marker
      is rewritten to that passage (`[S1]` -> `[S3]`, or `[S3]` added), recorded as a `guardrail_actions` entry
      "reattributed_citation:S1->S3:<sentence>" and in the verdict's `reattributed_from`. A claim that negates or
      opposes its cited passage is never re-attributed. The citations then point at what says the sentence, not
      at what the model named.
    - A sentence without a valid marker is unsupported, unless it is connective text: no marker at all (not even
      an invalid one), at most `reading.connective_max_words` words and no digits ("Here are the steps:").
      Connective sentences are neither supported nor unsupported claims: they are left out of `supported_ratio`
      but counted as uncited sentences in `citation_coverage`.
    - Reports `validation.unsupported_sentences`, `citation_coverage` (share of the answer's sentences that carry a
      valid, supporting citation), and `support = {"supported", "supported_ratio", "scores"}` where
      `supported_ratio` is the share of claims (non-connective sentences) that are supported, and `supported` is
      False below `support.min_ratio`; the output guardrails use it to block the answer. Each entry of `scores`
      says whether the sentence was `contradicted` and by which `cues` (`negation`, `antonym:<word>`,
      `number:<n> <unit>`). Coverage and ratio describe the answer as written, before any removal.
    - Builds `citations` (`citation_list`): one entry per passage the answer cites, in order of first use, with
      display text "<title> › <section>", a snippet, a URL that names the section, `chunk_id`, `source`, `kb` and
      `confidence` (the best support score of the sentences citing it).

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

    moved_settings: ClassVar[dict[str, str]] = MOVED_SETTINGS

    def __init__(
        self,
        *,
        support: dict[str, Any] | None = None,
        remove_unsupported: bool = True,
        reattribute: bool = False,
        fallback_message: str = FALLBACK_MESSAGE,
        skip_statuses: list[str] | None = None,
        scoring: dict[str, Any] | None = None,
        contradictions: dict[str, Any] | None = None,
        citations: dict[str, Any] | None = None,
        reading: dict[str, Any] | None = None,
    ) -> None:
        """
        :param support: What counts as supported: a sentence's lowest support score (0..1) and an answer's lowest
            share of supported claims (keys and defaults: `SUPPORT_DEFAULTS`).
        :param remove_unsupported: Remove unsupported and contradicted sentences (with their citations) from the answer.
        :param reattribute: Point an unsupported or unmarked claim at another passage that supports it instead.
        :param fallback_message: The answer when every claim was removed.
        :param skip_statuses: Statuses whose answers are not verified; None means `["fallback"]`.
        :param scoring: The support score's settings (keys and defaults: `claim_alignment.SCORING_DEFAULTS`).
        :param contradictions: Contradiction detection (keys and defaults: `contradiction.CONTRADICTION_DEFAULTS`).
        :param citations: The citation entries (keys and defaults: `citation_list.CITATION_DEFAULTS`).
        :param reading: How answers and passages are read (keys and defaults: `READING_DEFAULTS`).
        :raises ValueError: On a setting a group does not have, or `contradictions.antonyms` that are not pairs.
        """
        self.support = setting_group("support", support, SUPPORT_DEFAULTS)
        self.remove_unsupported = remove_unsupported
        self.reattribute = reattribute
        self.fallback_message = fallback_message
        self.skip_statuses = skip_statuses
        self.scoring = setting_group("scoring", scoring, SCORING_DEFAULTS)
        self.contradictions = setting_group("contradictions", contradictions, CONTRADICTION_DEFAULTS)
        self.citations = setting_group("citations", citations, CITATION_DEFAULTS)
        self.reading = setting_group("reading", reading, READING_DEFAULTS)
        self._aligner = ClaimAligner(self.scoring, self.contradictions, self.reading)
        self._citation_list = CitationList(self.citations, self.reading["citation_pattern"])

    def warm_up(self) -> None:
        """Load the embedding model."""
        self._aligner.warm_up()

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Verify the citations of `state["answer"]` against `state["passages"]`.

        :param state: The request state; reads `answer`, `passages` and `status`, or `reply` when the answer is
            streamed (a `ReplyStream` the model is still to write).
        :returns:
            - `state`: the state with the cleaned `answer`, `citations`, `citation_coverage`, `support` and the
              validation records; unchanged but for the path when there is nothing to verify. A streamed reply is
              verified as it is written: `reply` becomes a `VerifiedReply`, which releases each sentence once it is
              verified and returns this verification of the complete answer.
        """
        if isinstance(state.get("reply"), ReplyStream):
            return {"state": State(state, reply=VerifiedReply(self, state))}
        started = time.perf_counter()
        answer = str(state.get("answer") or "")
        passages = list(state.get("passages") or [])
        skip = ["fallback"] if self.skip_statuses is None else self.skip_statuses
        pattern = self.reading["citation_pattern"]

        if not passages or state.get("status") in skip:
            cleaned, removed = without_invalid_markers(answer, set(passages_by_id(passages)), pattern)
            updates = {"answer": cleaned} if removed else {}
            new_state = advance(state, stage="verify", started=started, steps=["verify_citations"], **updates)
            if removed:
                new_state = with_validation(
                    new_state, "guardrail_actions", *(f"removed_invalid_citation:{i}" for i in removed)
                )
            return {"state": new_state}

        by_id = passages_by_id(passages)
        cleaned, removed = without_invalid_markers(answer, set(by_id), pattern)

        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        sentences = self.sentence_verdicts(self.units(answer), passages, question)
        claims = [s for s in sentences if not s["connective"]]

        supported_count = sum(1 for s in claims if s["supported"])
        coverage = supported_count / len(sentences) if sentences else 0.0
        ratio = supported_count / len(claims) if claims else 0.0
        support = {
            "supported": bool(claims) and ratio >= self.support["min_ratio"],
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
        cleaned = with_reattributed(cleaned, reattributed, set(by_id), pattern)
        updates: dict[str, Any] = {"answer": cleaned}
        actions = [f"removed_invalid_citation:{i}" for i in removed]
        actions += [f"reattributed_citation:{','.join(s['reattributed_from']) or 'none'}->{s['ids'][0]}:{s['text']}"
                    for s in reattributed]
        if dropped:
            actions.extend(
                f"removed_{'contradicted' if s['cues'] else 'unsupported'}_sentence:{s['text']}" for s in dropped
            )
            if supported_count:
                updates.update(answer=without_sentences(cleaned, dropped, set(by_id), pattern), status="partial")
            else:
                updates.update(answer=self.fallback_message, status="fallback")
                actions.append("fallback:no_supported_sentence")
        kept = [s for s in claims if self.keeps(s)]
        fallback = updates.get("status") == "fallback"
        citations = [] if fallback else self._citation_list.build(updates["answer"], by_id, kept)
        actions += [f"dropped_unsafe_url:{c['id']}" for c in citations
                    if c["url"] != self._citation_list.url(by_id[c["id"]])]
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
        abbreviations = self.reading["abbreviations"]
        return split_units(answer, abbreviations=DEFAULT_ABBREVIATIONS if abbreviations is None else abbreviations,
                           citation_pattern=self.reading["citation_pattern"])

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
        by_id = passages_by_id(passages)
        sentences = self._sentences(units, set(by_id))
        premise = self._aligner.detector.negated_words(question)
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
                          and not c["cues"] and c["score"] >= self.scoring["reattribute_threshold"]]
            if not supporting:
                continue
            best = max(supporting, key=lambda c: c["score"])
            marker = f"[{best['ids'][0]}]"
            unit = rewrite_markers(claim["unit"], lambda _ids: [], self.reading["citation_pattern"]).rstrip()
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
        return without_invalid_markers(text, set(passages_by_id(passages)), self.reading["citation_pattern"])[0]

    def citations_of(self, text: str, passages: list[Document], verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """
        The structured citations of a verified text, in order of first use, as `run` builds `state["citations"]`.

        :param text: Verified text with `[S#]` markers.
        :param passages: The passages the markers point at.
        :param verdicts: The verdicts of the text's sentences (each citation's `confidence` is their best score).
        :returns: One citation per passage cited.
        """
        return self._citation_list.build(text, passages_by_id(passages), [v for v in verdicts if not v["connective"]])

    def _sentences(self, units: list[Unit], valid: set[str]) -> list[dict[str, Any]]:
        """The units' sentences with their valid ids; a sentence that had any marker, even an invalid one, is
        a claim, never connective text."""
        sentences: list[dict[str, Any]] = []
        for unit in units:
            if unit.kind == "heading":
                continue
            ids: list[str] = []
            markers = find_markers(unit.text, self.reading["citation_pattern"])
            for _, _, marker_ids in markers:
                ids.extend(i for i in marker_ids if i in valid and i not in ids)
            text = strip_markers(unit.text, self.reading["citation_pattern"])
            claim = strip_heading_markers(strip_list_marker(text))
            if not claim:
                continue
            words = claim.split()
            connective = (
                not markers
                and len(words) <= self.reading["connective_max_words"]
                and not any(ch.isdigit() for ch in claim)
            )
            sentences.append(
                {"text": text, "claim": claim, "unit": unit.text, "ids": ids, "connective": connective,
                 "score": 0.0, "supported": False, "cues": []}
            )
        return sentences

    def _score_claims(self, claims: list[dict[str, Any]], by_id: dict[str, Document], premise: set[str]) -> None:
        """Score the claims (`ClaimAligner`): each gets its `score`, `cues` and whether it is `supported`."""
        self._aligner.score(claims, by_id, premise)
        for claim in claims:
            claim["supported"] = claim["score"] >= self.support["threshold"] and not claim["cues"]

