"""
Query rewriting: the retry rewrite of the quality loop, and condensation of conversational follow-ups.

Both tasks are deterministic by default; an LLM tier is optional and falls back to the deterministic result.
"""

import math
import re
import time
from collections import Counter, defaultdict
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict

from components.chat import ask_chat_generator, chat_generator_from_init_parameters, chat_generator_to_dict
from components.embedding import EmbeddingBackend
from components.quality_gate import (
    TermNormaliser,
    tokenize,
)
from components.state import advance, with_validation

TASKS = ("retry", "condense")
STRATEGIES = ("keywords", "feedback")

DEFAULT_REWRITE_PROMPT = (
    "The previous search did not find relevant documents. Rewrite the question into a more specific search "
    "query. Keep the original intent, add domain keywords where useful, and do not repeat an earlier query.\n"
    "Question: {question}\n"
    "Earlier queries: {previous_queries}\n"
    "Domain keywords: {keywords}\n"
    "Terms from the weak results: {feedback_terms}\n"
    "Output ONLY the rewritten query."
)

DEFAULT_CONDENSE_PROMPT = (
    "Given the conversation so far and a follow-up question, rewrite the follow-up into a standalone search "
    "query that can be understood without the conversation. Output ONLY the standalone query.\n"
    "Conversation:\n{history}\n"
    "Follow-up question: {question}"
)

DEFAULT_FOLLOWUP_PATTERNS = [
    r"^\s*(and|but|also|or|so|then|plus)\b",
    r"^\s*(what|how)\s+about\b",
    r"^\s*what\s+if\b",
    r"^\s*(same|ditto)\b",
    r"\b(as well|too|instead)\s*[?.!]*\s*$",
]
DEFAULT_REFERENCE_PATTERNS = [r"\b(it|its|that|this|these|those|they|them|their|there|one|ones|he|she|him|her)\b"]
DEFAULT_PHRASE_MARKERS = [
    "a", "an", "the", "my", "our", "your", "their", "his", "her", "its", "this", "that", "these", "those", "each",
    "every", "any", "some", "no", "of", "for", "in", "on", "with", "about", "from", "by", "into", "per", "via",
    "without", "between", "under", "over",
]  # fmt: skip


def _same_query(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        line = re.sub(r"^\s*(standalone\s+query|rewritten\s+query|query|search\s+query)\s*:\s*", "", line, flags=re.I)
        line = line.strip().strip("\"'`").strip()
        if line:
            return line
    return ""


@component
class QueryRewriter:
    """
    Rewrites the query: `task="retry"` for the next retrieval attempt, `task="condense"` for follow-up questions.

    **retry** (after the quality gate's `retry` route; `state["attempt"]` is already the new attempt number):
    the new query is always the original question (`condensed_query` when the condenser made it standalone, else
    `original_query`) plus expansion terms, never a rewrite of a rewrite, and `original_query` is never changed. Strategies are cumulative, in the order of `strategies`:
    attempt 1 adds the KB keywords (`kb_keywords` of `state["kbs"]` most similar to the question by embedding,
    at most `max_expansion_terms`, at least `min_keyword_similarity`); attempt 2 adds pseudo-relevance-feedback
    terms as well (tf-idf over the `prf_top_k` weak documents of the last attempt, without stopwords and question
    terms, at most `prf_terms`); later attempts take one more term of each. If a query would repeat an earlier
    attempt, more terms are taken (then the remaining strategies, then the question's content terms only) until
    it differs. Path `rewrite_and_retry`; `state["rewrites"]` records each rewrite.

    **condense** (before routing): when `state["history"]` is non-empty and the question is conversational
    (a short follow-up such as "and for the free tier?", or a short question that leans on a pronoun such as
    "how much does it cost?"), the salient noun phrases of the last user turns are appended, e.g.
    "and how do I revoke it? API key". Standalone questions are left unchanged. Path `condense_query` only when
    the query changed; `state["condensed_query"]` holds the standalone question.

    Usage:
    ```python
    from components.query_rewriter import QueryRewriter
    from components.state import new_state

    condenser = QueryRewriter(task="condense")
    state = new_state("and how do I revoke it?",
                      history=[{"role": "user", "content": "How do I rotate an API key?"}])
    condenser.run(state=state)["state"]["query"]   # "and how do I revoke it? API key"

    rewriter = QueryRewriter(task="retry", kb_keywords={"faq": ["account", "password", "api_key", "billing"]})
    ```
    """

    def __init__(
        self,
        *,
        task: str = "retry",
        kb_keywords: dict[str, list[str]] | None = None,
        strategies: list[str] | None = None,
        max_expansion_terms: int = 3,
        min_keyword_similarity: float = 0.15,
        prf_terms: int = 3,
        prf_top_k: int = 3,
        prf_min_term_length: int = 3,
        stopwords: list[str] | None = None,
        stemmer_language: str | None = "english",
        max_history_turns: int = 2,
        use_assistant_turns: bool = False,
        max_condense_words: int = 12,
        max_reference_content_terms: int = 2,
        max_carry_terms: int = 4,
        max_carry_phrases: int = 2,
        followup_patterns: list[str] | None = None,
        reference_patterns: list[str] | None = None,
        phrase_markers: list[str] | None = None,
        embedding_model: str | None = None,
        embedding_cache_dir: str | None = None,
        chat_generator: Any = None,
        rewrite_prompt: str = DEFAULT_REWRITE_PROMPT,
        condense_prompt: str = DEFAULT_CONDENSE_PROMPT,
        max_query_chars: int = 500,
    ) -> None:
        """
        :param task: `"retry"` (rewrite for the next retrieval attempt) or `"condense"` (standalone follow-ups).
        :param kb_keywords: Knowledge base name -> domain keywords (from the KB YAML); `_` reads as a space.
        :param strategies: Order in which retry strategies are added, cumulatively; None means
            `["keywords", "feedback"]`.
        :param max_expansion_terms: KB keywords added per attempt.
        :param min_keyword_similarity: Least cosine similarity between the question and a keyword to add it.
        :param prf_terms: Feedback terms added per attempt.
        :param prf_top_k: Weak documents (best first) that feedback terms are taken from.
        :param prf_min_term_length: Shorter feedback terms are ignored.
        :param stopwords: Words never used as terms; None uses the built-in English list.
        :param stemmer_language: Snowball stemmer language for term matching, or None for exact tokens.
        :param max_history_turns: Most recent user turns the condenser looks at.
        :param use_assistant_turns: Also carry phrases from the last assistant turn (lower priority).
        :param max_condense_words: Questions longer than this are never treated as follow-ups.
        :param max_reference_content_terms: A question matching only a reference pattern (a pronoun) counts as a
            follow-up when it has at most this many content terms.
        :param max_carry_terms: Most words carried over from the history.
        :param max_carry_phrases: Most phrases carried over from the history.
        :param followup_patterns: Regexes (case-insensitive) marking a follow-up; None uses the defaults
            (`and ...`, `what about ...`, `... too?`).
        :param reference_patterns: Regexes marking words that refer back (pronouns); None uses the defaults.
        :param phrase_markers: Words (determiners, prepositions) after which a run of content words is taken as a
            noun phrase; None uses the defaults.
        :param embedding_model: Embedding model for keyword ranking; None uses the configured default.
        :param embedding_cache_dir: Embedding cache directory; None uses the default, `"off"` disables it.
        :param chat_generator: Optional Haystack chat generator for an LLM rewrite/condense tier; None disables it.
        :param rewrite_prompt: LLM retry prompt; `{question}`, `{previous_queries}`, `{keywords}`,
            `{feedback_terms}` are replaced.
        :param condense_prompt: LLM condense prompt; `{history}` and `{question}` are replaced.
        :param max_query_chars: An LLM reply longer than this is rejected.
        :raises ValueError: On an unknown task or strategy, or limits out of bounds.
        """
        if task not in TASKS:
            raise ValueError(f"Unknown task '{task}'. Use one of {', '.join(TASKS)}.")
        unknown = [s for s in (strategies or []) if s not in STRATEGIES]
        if unknown:
            raise ValueError(f"Unknown strategies {unknown}. Use {', '.join(STRATEGIES)}.")
        if min(max_expansion_terms, prf_terms, prf_top_k, max_history_turns, max_carry_terms) < 0:
            raise ValueError("Term and turn limits must be >= 0.")
        self.task = task
        self.kb_keywords = kb_keywords
        self.strategies = strategies
        self.max_expansion_terms = max_expansion_terms
        self.min_keyword_similarity = min_keyword_similarity
        self.prf_terms = prf_terms
        self.prf_top_k = prf_top_k
        self.prf_min_term_length = prf_min_term_length
        self.stopwords = stopwords
        self.stemmer_language = stemmer_language
        self.max_history_turns = max_history_turns
        self.use_assistant_turns = use_assistant_turns
        self.max_condense_words = max_condense_words
        self.max_reference_content_terms = max_reference_content_terms
        self.max_carry_terms = max_carry_terms
        self.max_carry_phrases = max_carry_phrases
        self.followup_patterns = followup_patterns
        self.reference_patterns = reference_patterns
        self.phrase_markers = phrase_markers
        self.embedding_model = embedding_model
        self.embedding_cache_dir = embedding_cache_dir
        self.chat_generator = chat_generator
        self.rewrite_prompt = rewrite_prompt
        self.condense_prompt = condense_prompt
        self.max_query_chars = max_query_chars

        self._terms = TermNormaliser(stopwords, stemmer_language, 2)
        self._strategies = list(strategies) if strategies is not None else list(STRATEGIES)
        self._followup = [
            re.compile(p, re.IGNORECASE)
            for p in (DEFAULT_FOLLOWUP_PATTERNS if followup_patterns is None else followup_patterns)
        ]
        self._reference = [
            re.compile(p, re.IGNORECASE)
            for p in (DEFAULT_REFERENCE_PATTERNS if reference_patterns is None else reference_patterns)
        ]
        self._markers = frozenset(
            m.casefold() for m in (DEFAULT_PHRASE_MARKERS if phrase_markers is None else phrase_markers)
        )
        self._backend: EmbeddingBackend | None = None
        self._keyword_vectors: dict[str, np.ndarray] = {}

    def warm_up(self) -> None:
        """Load the embedding backend (retry task with keywords) and warm up the optional chat generator."""
        if self.task == "retry" and self.kb_keywords and self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.embedding_cache_dir)
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    @component.output_types(state=dict[str, Any])
    def run(self, state: dict) -> dict[str, dict[str, Any]]:
        """
        Rewrite (task `retry`) or condense (task `condense`) the query.

        :param state: The request state.
        :returns: `state`, a new state.
        """
        if self.task == "condense":
            return {"state": self._condense(state)}
        return {"state": self._retry(state)}

    # ---------------------------------------------------------------- retry

    def _expansion_keywords(self, question: str, kbs: list[str]) -> list[str]:
        """KB keywords ranked by similarity to the question, without those already in it."""
        keywords: list[str] = []
        for kb in kbs:
            for keyword in (self.kb_keywords or {}).get(kb, []):
                text = " ".join(str(keyword).replace("_", " ").split())
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
        return [k for similarity, k in ranked if similarity >= self.min_keyword_similarity]

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
                if self._terms.is_content(t) and len(t) >= self.prf_min_term_length and not t.isdigit()
            ]
            doc_terms.append(tokens)
        total = len(doc_terms)
        df: Counter[str] = Counter()
        for tokens in doc_terms:
            df.update({stem for stem, _ in tokens})
        weights: dict[str, float] = defaultdict(float)
        surfaces: dict[str, Counter[str]] = defaultdict(Counter)
        for rank, tokens in enumerate(doc_terms[: self.prf_top_k]):
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
        limits = {"keywords": self.max_expansion_terms, "feedback": self.prf_terms}
        level = max(1, attempt)
        active = self._strategies[:level]
        extra = max(0, level - len(self._strategies))
        longest = max([len(pool) for pool in pools.values()] + [0])
        candidates: list[tuple[list[str], list[str], str]] = []
        for strategy_set in (active, self._strategies):
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

    def _retry(self, state: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        attempt = int(state.get("attempt") or 1)
        rewrites = list(state.get("rewrites") or [])
        previous = [str(a.get("query") or "") for a in state.get("attempts") or []]
        previous += [str(r.get("query") or "") for r in rewrites]
        previous += [str(state.get("query") or ""), question]

        kbs = list(state.get("kbs") or ([state["kb"]] if state.get("kb") else list((self.kb_keywords or {}).keys())))
        keywords = self._expansion_keywords(question, kbs)
        keyword_stems = {s for k in keywords for s in self._terms.terms(k)}
        feedback = self._feedback_terms(question, list(state.get("documents") or []), keyword_stems)
        pools = {"keywords": keywords, "feedback": feedback}

        candidates = self._retry_candidates(question, pools, attempt)
        fresh = [c for c in candidates if not any(_same_query(c[2], p) for p in previous)]
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
                self.rewrite_prompt.replace("{question}", question)
                .replace("{previous_queries}", "; ".join(dict.fromkeys(p for p in previous if p)))
                .replace("{keywords}", ", ".join(keywords))
                .replace("{feedback_terms}", ", ".join(feedback))
            )
            try:
                reply = _first_line(ask_chat_generator(self.chat_generator, prompt))
                if not reply or len(reply) > self.max_query_chars:
                    raise ValueError("empty or overlong reply")
                if any(_same_query(reply, p) for p in previous):
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
        return advance(
            base,
            stage="query_rewriter",
            started=started,
            steps=["rewrite_and_retry"],
            query=new_query,
            rewrites=rewrites,
        )

    # ------------------------------------------------------------- condense

    def is_followup(self, question: str) -> bool:
        """
        Whether a question leans on the conversation (deterministic rules).

        :param question: The question.
        :returns: True for a short follow-up (a follow-up pattern, a pronoun with few content terms, or no content
            terms at all).
        """
        words = question.split()
        if not words or len(words) > self.max_condense_words:
            return False
        content = [t for t in tokenize(question) if self._terms.is_content(t)]
        if not content:
            return True
        if any(p.search(question) for p in self._followup):
            return True
        return len(content) <= self.max_reference_content_terms and any(p.search(question) for p in self._reference)

    def _phrases(self, text: str) -> list[tuple[list[str], bool]]:
        """Runs of content words in a text, each with whether a phrase marker precedes it."""
        runs: list[tuple[list[str], bool]] = []
        current: list[str] = []
        marked = False
        previous_token: str | None = None
        previous_end = 0
        for match in re.finditer(r"[^\W_]+", text):
            token, lower = match.group(0), match.group(0).casefold()
            gap = text[previous_end : match.start()]
            broken = bool(gap.strip(" \t-"))
            if current and (broken or not self._terms.is_content(lower)):
                runs.append((current, marked))
                current = []
            if self._terms.is_content(lower):
                if not current:
                    marked = previous_token is not None and previous_token in self._markers and not broken
                current.append(token)
            previous_token, previous_end = lower, match.end()
        if current:
            runs.append((current, marked))
        return runs

    def _carry_phrases(self, question: str, history: list[dict[str, Any]]) -> list[str]:
        """The salient phrases of the recent turns that the question does not already contain."""
        users = [str(t.get("content") or "") for t in history if t.get("role") == "user" and t.get("content")]
        recent = list(reversed(users[-self.max_history_turns :])) if self.max_history_turns else []
        sources: list[tuple[str, float]] = [(text, 1.0 / (index + 1)) for index, text in enumerate(recent)]
        if self.use_assistant_turns:
            assistants = [str(t.get("content") or "") for t in history if t.get("role") == "assistant"]
            if assistants and assistants[-1]:
                sources.append((assistants[-1], 0.25))
        candidates: list[tuple[float, int, list[str], bool]] = []
        for text, recency in sources:
            for words, marked in self._phrases(text):
                score = (1.5 if len(words) > 1 else 1.0) * recency
                candidates.append((score, len(candidates), words, marked))
        if any(marked for *_, marked in candidates):
            # Noun phrases (after a determiner or preposition) when there are any: verbs of the old question
            # ("rotate") would pull the search back to it.
            candidates = [c for c in candidates if c[3]]
        known = set(self._terms.terms(question))
        chosen: list[str] = []
        used = 0
        for _, _, words, _ in sorted(candidates, key=lambda c: (-c[0], c[1])):
            if len(chosen) >= self.max_carry_phrases:
                break
            stems = {self._terms.stem(w.casefold()) for w in words}
            if stems <= known or used + len(words) > self.max_carry_terms:
                continue
            chosen.append(" ".join(words))
            known |= stems
            used += len(words)
        return chosen

    def _condense(self, state: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        question = str(state.get("query") or "")
        history = [t for t in (state.get("history") or []) if isinstance(t, dict)]
        if not history or not question.strip() or not self.is_followup(question):
            return advance(state, stage="query_condenser", started=started, condensed_query=question)

        condensed = question
        phrases = self._carry_phrases(question, history)
        if phrases:
            condensed = " ".join([question.strip(), *phrases])
        warning = None
        if self.chat_generator is not None:
            turns = history[-2 * self.max_history_turns :] if self.max_history_turns else []
            transcript = "\n".join(f"{t.get('role')}: {t.get('content')}" for t in turns)
            prompt = self.condense_prompt.replace("{history}", transcript).replace("{question}", question)
            try:
                reply = _first_line(ask_chat_generator(self.chat_generator, prompt))
                if not reply or len(reply) > self.max_query_chars:
                    raise ValueError("empty or overlong reply")
                condensed = reply
            except Exception as error:  # noqa: BLE001 - any LLM failure falls back to the deterministic condense
                warning = f"query_rewriter: LLM condense failed ({type(error).__name__}: {error}); rules used"
        base = with_validation(state, "confidence_warnings", warning) if warning else state
        changed = not _same_query(condensed, question)
        return advance(
            base,
            stage="query_condenser",
            started=started,
            steps=["condense_query"] if changed else [],
            query=condensed,
            condensed_query=condensed,
        )

    # -------------------------------------------------------- serialisation

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component."""
        return default_to_dict(
            self,
            task=self.task,
            kb_keywords=self.kb_keywords,
            strategies=self.strategies,
            max_expansion_terms=self.max_expansion_terms,
            min_keyword_similarity=self.min_keyword_similarity,
            prf_terms=self.prf_terms,
            prf_top_k=self.prf_top_k,
            prf_min_term_length=self.prf_min_term_length,
            stopwords=self.stopwords,
            stemmer_language=self.stemmer_language,
            max_history_turns=self.max_history_turns,
            use_assistant_turns=self.use_assistant_turns,
            max_condense_words=self.max_condense_words,
            max_reference_content_terms=self.max_reference_content_terms,
            max_carry_terms=self.max_carry_terms,
            max_carry_phrases=self.max_carry_phrases,
            followup_patterns=self.followup_patterns,
            reference_patterns=self.reference_patterns,
            phrase_markers=self.phrase_markers,
            embedding_model=self.embedding_model,
            embedding_cache_dir=self.embedding_cache_dir,
            chat_generator=chat_generator_to_dict(self.chat_generator),
            rewrite_prompt=self.rewrite_prompt,
            condense_prompt=self.condense_prompt,
            max_query_chars=self.max_query_chars,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "QueryRewriter":
        """Deserialise the component."""
        return default_from_dict(cls, chat_generator_from_init_parameters(data))
