"""
The retry rewrite of the quality loop: a weak query is rewritten for another retrieval attempt. Deterministic by
default; an LLM tier is optional and falls back to the deterministic rewrite.
"""

import math
import re
import time
from collections import Counter, defaultdict
from typing import Any, ClassVar

import numpy as np
from haystack import Document, component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_for_query
from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.kb_profile import KBProfiles
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.terms import TermNormaliser, same_words, tokenize

STRATEGIES = ("keywords", "feedback")
#: How expansion terms are chosen: every key of `QueryRewriter`'s `expansion`, with its default.
DEFAULT_EXPANSION: dict[str, Any] = {
    "strategies": None,  # the order in which strategies are added, cumulatively; None: `STRATEGIES`
    "max_expansion_terms": 3,  # KB keywords added per attempt
    "min_keyword_similarity": 0.15,  # least cosine similarity between the question and a keyword to add it
    "max_profile_keywords": 400,  # most titles and headings of one KB taken as keywords
    "prf_terms": 3,  # feedback terms added per attempt
    "prf_top_k": 3,  # weak documents (best first) that feedback terms are taken from
    "prf_min_term_length": 3,  # shorter feedback terms are ignored
    "stopwords": None,  # words never used as terms; None: Gatehouse's list
    "stemmer_language": "english",  # Snowball stemmer language for term matching; None: exact tokens
    "embedding_model": None,  # the model that ranks keywords by similarity; None: the configured default
    "cache_dir": None,  # its embedding cache; None: the configured default, "off": no cache
}

DEFAULT_REWRITE_PROMPT = (
    "The previous search did not find relevant documents. Rewrite the question into a more specific search "
    "query. Keep the original intent, add domain keywords where useful, and do not repeat an earlier query.\n"
    "Question: {question}\n"
    "Earlier queries: {previous_queries}\n"
    "Domain keywords: {keywords}\n"
    "Terms from the weak results: {feedback_terms}\n"
    "Output ONLY the rewritten query."
)
#: The optional LLM tier: its `prompt` (`{question}`, `{previous_queries}`, `{keywords}`, `{feedback_terms}` filled
#: in) and the longest reply it may give (`max_query_chars`; a longer one is rejected, the deterministic rewrite used).
LLM: dict[str, Any] = {"prompt": DEFAULT_REWRITE_PROMPT, "max_query_chars": 500}


def _expansion_settings(expansion: dict[str, Any] | None) -> dict[str, Any]:
    """`expansion` with its defaults, checked."""
    settings = setting_group("expansion", expansion, DEFAULT_EXPANSION)
    unknown = [s for s in (settings["strategies"] or []) if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"Unknown expansion.strategies {unknown}. Use {', '.join(STRATEGIES)}.")
    if min(settings["max_expansion_terms"], settings["prf_terms"], settings["prf_top_k"]) < 0:
        raise ValueError("expansion: max_expansion_terms, prf_terms and prf_top_k must be >= 0.")
    return settings


@component
class QueryRewriter(MovedSettings, ChatGeneratorSerialization):
    """
    Rewrites a weak query for the next retrieval attempt (after the quality gate's `retry` route;
    `state["attempt"]` is already the new attempt number).

    The new query is always the original question (`condensed_query` when the condenser made it standalone, else
    `original_query`) plus expansion terms, never a rewrite of a rewrite, and `original_query` is never changed.
    Strategies are cumulative, in the order of `expansion.strategies`: attempt 1 adds the KB keywords (`kb_keywords`
    and the profiles of `state["kbs"]`, most similar to the question by embedding, at most `max_expansion_terms`, at
    least `min_keyword_similarity`); attempt 2 adds pseudo-relevance-feedback terms as well (tf-idf over the
    `prf_top_k` weak documents of the last attempt, without stopwords and question terms, at most `prf_terms`); later
    attempts take one more term of each (the limits are keys of `expansion`). If a query would repeat an earlier attempt,
    more terms are taken (then the remaining strategies, then the question's content terms only) until it differs.
    With a `chat_generator`, its rewrite is used unless it fails or repeats an earlier query. Path
    `rewrite_and_retry`; `state["rewrites"]` records each rewrite.

    Usage:
    ```python
    from gatehouse.components.query.query_rewriter import QueryRewriter
    from gatehouse.components.state import new_state

    rewriter = QueryRewriter(kb_keywords={"faq": ["account", "password", "api_key", "billing"]})
    state = new_state("How do I reset my login?", kbs=["faq"], attempt=1)   # as the quality gate's `retry` emits it
    rewriter.run(state=state)["state"]["query"]   # the question and the faq keywords closest to it
    ```
    """

    #: Settings that moved into `expansion` and `llm` (a YAML still naming one is refused with its new place).
    moved_settings: ClassVar[dict[str, str]] = {
        **{name: f"expansion.{name}" for name in (
            "strategies", "max_expansion_terms", "min_keyword_similarity", "max_profile_keywords", "prf_terms",
            "prf_top_k", "prf_min_term_length", "stopwords", "stemmer_language", "embedding_model")},
        "embedding_cache_dir": "expansion.cache_dir",
        "rewrite_prompt": "llm.prompt",
        "max_query_chars": "llm.max_query_chars",
    }

    def __init__(
        self,
        *,
        kb_keywords: dict[str, list[str]] | None = None,
        profile_store: Any = None,
        expansion: dict[str, Any] | None = None,
        chat_generator: Any = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        """
        :param kb_keywords: Knowledge base name -> domain keywords (from the KB YAML); `_` reads as a space.
        :param profile_store: Lexical store whose KB profiles give the routed KBs' keywords, abbreviations, headings.
        :param expansion: The strategies and how their terms are chosen, keys of `DEFAULT_EXPANSION` (a key left out
            keeps its default).
        :param chat_generator: Optional Haystack chat generator for an LLM rewrite tier; None disables it.
        :param llm: The LLM tier's `prompt` and `max_query_chars` (`LLM`: keys and defaults).
        :raises ValueError: On an unknown strategy or key of a group, or term limits below 0.
        """
        self.kb_keywords = kb_keywords
        self.profile_store = profile_store
        self.expansion = _expansion_settings(expansion)
        self.chat_generator = chat_generator
        self.llm = setting_group("llm", llm, LLM)
        self._terms = TermNormaliser(self.expansion["stopwords"], self.expansion["stemmer_language"], 2)
        self._profiles = KBProfiles(profile_store) if profile_store is not None else None
        self._backend: EmbeddingBackend | None = None
        self._keyword_vectors: dict[str, np.ndarray] = {}

    def warm_up(self) -> None:
        """Load the embedding backend (with KB keywords or profiles) and warm up the optional chat generator."""
        if (self.kb_keywords or self._profiles) and self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.expansion["embedding_model"],
                                                 cache_dir=self.expansion["cache_dir"])
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def _profile_keywords(self, question: str, kbs: list[str], tenant: str | None) -> list[str]:
        """What the routed KBs' profiles offer: abbreviations the question uses or spells out, entry keywords, headings."""
        if self._profiles is None:
            return []
        asked = question.casefold()
        found: list[str] = []
        for profile in self._profiles.readable(tenant):
            if kbs and profile.kb not in kbs:
                continue
            for short, long in profile.abbreviations.items():
                if re.search(rf"\b{re.escape(short)}s?\b", question):
                    found.append(long)
                elif long.casefold() in asked:
                    found.append(short)
            found += list((profile.entry or {}).get("keywords") or [])
            found += [*profile.titles, *profile.headings][: self.expansion["max_profile_keywords"]]
        return [k.rstrip("*") for k in found]

    def _expansion_keywords(self, question: str, kbs: list[str], tenant: str | None = None) -> list[str]:
        """KB keywords ranked by similarity to the question, without those already in it."""
        keywords: list[str] = []
        for kb in kbs:
            for keyword in (self.kb_keywords or {}).get(kb, []):
                text = " ".join(str(keyword).replace("_", " ").split())
                if text and text.casefold() not in {k.casefold() for k in keywords}:
                    keywords.append(text)
        for keyword in self._profile_keywords(question, kbs, tenant):
            text = " ".join(keyword.split())
            if text and text.casefold() not in {k.casefold() for k in keywords}:
                keywords.append(text)
        question_terms = set(self._terms.terms(question))
        keywords = [k for k in keywords if not set(self._terms.terms(k)) <= question_terms]
        if not keywords:
            return []
        if self._backend is None:
            self.warm_up()
        assert self._backend is not None
        missing = [k for k in keywords if k not in self._keyword_vectors]
        if missing:
            self._keyword_vectors.update(zip(missing, self._backend.embed(missing)))
        query_vector = self._backend.embed([question])[0]
        scored = [(float(np.dot(self._keyword_vectors[k], query_vector)), k) for k in keywords]
        ranked = sorted(scored, key=lambda pair: (-pair[0], pair[1]))
        return [k for similarity, k in ranked if similarity >= self.expansion["min_keyword_similarity"]]

    def _feedback_terms(self, question: str, documents: list[Document], exclude: set[str]) -> list[str]:
        """Pseudo-relevance-feedback terms: rank-weighted tf of the top weak documents times idf over all of them."""
        if not documents:
            return []
        excluded = set(self._terms.terms(question)) | exclude
        doc_terms: list[list[tuple[str, str]]] = []
        for document in documents:
            tokens = [
                (self._terms.stem(t), t)
                for t in tokenize(document.content or "")
                if self._terms.is_content(t) and len(t) >= self.expansion["prf_min_term_length"] and not t.isdigit()
            ]
            doc_terms.append(tokens)
        total = len(doc_terms)
        df: Counter[str] = Counter()
        for tokens in doc_terms:
            df.update({stem for stem, _ in tokens})
        weights: dict[str, float] = defaultdict(float)
        surfaces: dict[str, Counter[str]] = defaultdict(Counter)
        for rank, tokens in enumerate(doc_terms[: self.expansion["prf_top_k"]]):
            if not tokens:
                continue
            counts = Counter(stem for stem, _ in tokens)
            for stem, surface in tokens:
                surfaces[stem][surface] += 1
            for stem, count in counts.items():
                if stem in excluded:
                    continue
                idf = math.log((total + 1) / (df[stem] + 0.5)) + 1.0
                weights[stem] += (count / len(tokens)) * idf / (rank + 1)
        ranked = sorted(weights.items(), key=lambda pair: (-pair[1], pair[0]))
        result = []
        for stem, _ in ranked:
            surface = sorted(surfaces[stem].items(), key=lambda pair: (-pair[1], len(pair[0]), pair[0]))[0][0]
            result.append(surface)
        return result

    def _retry_candidates(
        self, question: str, pools: dict[str, list[str]], attempt: int
    ) -> list[tuple[list[str], list[str], str]]:
        """Ordered `(strategies, terms, query)` candidates for an attempt, the planned one first."""
        limits = {"keywords": self.expansion["max_expansion_terms"], "feedback": self.expansion["prf_terms"]}
        level = max(1, attempt)
        order = list(STRATEGIES if self.expansion["strategies"] is None else self.expansion["strategies"])
        active = order[:level]
        extra = max(0, level - len(order))
        longest = max([len(pool) for pool in pools.values()] + [0])
        candidates: list[tuple[list[str], list[str], str]] = []
        for strategy_set in (active, order):
            for widen in range(0, longest + 1):
                terms: list[str] = []
                for strategy in strategy_set:
                    terms.extend(pools.get(strategy, [])[: limits[strategy] + extra + widen])
                terms = list(dict.fromkeys(terms))
                candidates.append((list(strategy_set), terms, " ".join([question.strip(), *terms])))
        # Last resort: the question's content words only, plus the planned terms.
        focus = [t for t in re.findall(r"[^\W_]+", question) if self._terms.is_content(t.casefold())]
        if focus:
            planned = candidates[0][1] if candidates else []
            candidates.append((["focus", *active], planned, " ".join([*focus, *planned])))
        return candidates

    @component.output_types(state=State)
    def run(self, state: State, deadline: float | None = None) -> dict[str, dict[str, Any]]:
        """
        Rewrite the query for the next attempt.

        :param state: The request state as the quality gate's `retry` route emits it.
        :param deadline: `time.monotonic()` by which the request must be answered (the LLM tier's calls fit in it).
        :returns: `state`, a new state with the new `query` and the rewrite recorded in `rewrites`.
        """
        started = time.perf_counter()
        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        attempt = int(state.get("attempt") or 1)
        rewrites = list(state.get("rewrites") or [])
        previous = [str(a.get("query") or "") for a in state.get("attempts") or []]
        previous += [str(r.get("query") or "") for r in rewrites]
        previous += [str(state.get("query") or ""), question]

        kbs = list(state.get("kbs") or ([state["kb"]] if state.get("kb") else list((self.kb_keywords or {}).keys())))
        keywords = self._expansion_keywords(question, kbs, state.get("tenant"))
        keyword_stems = {s for k in keywords for s in self._terms.terms(k)}
        feedback = self._feedback_terms(question, list(state.get("documents") or []), keyword_stems)
        pools = {"keywords": keywords, "feedback": feedback}

        candidates = self._retry_candidates(question, pools, attempt)
        fresh = [c for c in candidates if not any(same_words(c[2], p) for p in previous)]
        strategies, terms, new_query = fresh[0] if fresh else candidates[0]
        record: dict[str, Any] = {
            "attempt": attempt,
            "method": "deterministic",
            "strategies": strategies,
            "keywords": [t for t in terms if t in keywords],
            "feedback_terms": [t for t in terms if t in feedback],
        }
        warnings = [] if fresh else ["query_rewriter: no new expansion terms; the query repeats an earlier attempt"]
        if self.chat_generator is not None:
            prompt = (
                self.llm["prompt"].replace("{question}", question)
                .replace("{previous_queries}", "; ".join(dict.fromkeys(p for p in previous if p)))
                .replace("{keywords}", ", ".join(keywords))
                .replace("{feedback_terms}", ", ".join(feedback))
            )
            try:
                reply = ask_for_query(self.chat_generator, prompt, max_chars=self.llm["max_query_chars"],
                                      deadline=deadline)
                if any(same_words(reply, p) for p in previous):
                    raise ValueError("reply repeats an earlier query")
                new_query, record["method"], warnings = reply, "llm", []
            except Exception as error:  # noqa: BLE001 - any LLM failure falls back to the deterministic rewrite
                record["llm_error"] = f"{type(error).__name__}: {error}"
                warnings.append(
                    f"query_rewriter: LLM rewrite failed ({record['llm_error']}); deterministic rewrite used"
                )
        record["query"] = new_query
        rewrites.append(record)
        base = with_validation(state, "confidence_warnings", *warnings) if warnings else state
        return {"state": advance(base, stage="query_rewriter", started=started, steps=["rewrite_and_retry"],
                                 query=new_query, rewrites=rewrites)}
