"""
The retrieval quality gate: scores an attempt's documents against the user's question and decides pass/retry/exhaust.

The gate never loops by itself. It records the attempt and emits the state on `retry` or `done`; the search
pipeline's edge `retry -> query rewriter -> retrieval -> quality gate` is the loop, and `max_retries` bounds it.
"""

import re
import time
from typing import Any, ClassVar

from haystack import Document, component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.terms import TermNormaliser


DEFAULT_JUDGE_PROMPT = (
    "Rate how relevant the following context is for answering the user's question, on a scale from 0.0 "
    "(unrelated) to 1.0 (contains the answer). Return ONLY a decimal number.\n"
    "Question: {question}\n"
    "Context:\n{context}"
)


#: The weights of the signals in the heuristic score (`weights`).
DEFAULT_WEIGHTS: dict[str, float] = {"best_dense": 0.5, "mean_dense": 0.1, "coverage": 0.4}

#: The `dense` settings and their defaults: the `[low, high]` cosine values mapped to 0 and 1 (clipped; MiniLM rarely
#: exceeds 0.6 even for a chunk that holds the answer, and unrelated text sits near 0.1), the document meta key holding
#: the dense cosine score, whether a rewritten query's documents are scored against the question itself with the
#: embedding model rather than by the retriever's scores, and that model and its cache (None: the configured
#: defaults; `"off"` disables the cache).
DENSE_DEFAULTS: dict[str, Any] = {
    "range": [0.1, 0.6], "score_key": "dense_score", "rescore_rewritten": True, "embedding_model": None,
    "cache_dir": "off",
}

#: The `coverage` settings and their defaults: the meta fields whose text counts as part of a document (also when
#: re-scoring; None: title and section), the stopwords ignored in the question (None: the built-in English list),
#: the Snowball stemmer language for term matching (None: exact tokens) and the shortest content term.
COVERAGE_DEFAULTS: dict[str, Any] = {
    "meta_fields": None, "stopwords": None, "stemmer_language": "english", "min_term_length": 2,
}

#: The `judge` settings and their defaults: the share of the LLM rating in the final score when the judge answers,
#: its prompt (`{question}` and `{context}` are replaced) and the context characters sent.
JUDGE_DEFAULTS: dict[str, Any] = {"weight": 0.5, "prompt": DEFAULT_JUDGE_PROMPT, "max_context_chars": 4000}

#: Where the settings that moved into a group went (old name -> new place).
MOVED_SETTINGS: dict[str, str] = {
    **{f"{name}_weight": f"weights.{name}" for name in DEFAULT_WEIGHTS},
    "dense_range": "dense.range", "dense_score_key": "dense.score_key", "rescore_rewritten": "dense.rescore_rewritten",
    "embedding_model": "dense.embedding_model", "embedding_cache_dir": "dense.cache_dir",
    "coverage_meta_fields": "coverage.meta_fields",
    **{name: f"coverage.{name}" for name in ("stopwords", "stemmer_language", "min_term_length")},
    **{f"llm_{name}": f"judge.{name}" for name in JUDGE_DEFAULTS},
}


def parse_relevance(text: str) -> float | None:
    """
    Read a relevance rating in [0, 1] from an LLM reply: `0.7`, `7/10`, `70%`; None when there is none.

    :param text: The reply.
    :returns: The rating, or None when the reply holds no rating in range.
    """
    match = re.search(r"(-?\d+(?:\.\d+)?)\s*(%|/\s*10\b|/\s*100\b)?", text or "")
    if not match:
        return None
    value = float(match.group(1))
    scale = (match.group(2) or "").replace(" ", "")
    if scale == "%" or scale == "/100":
        value /= 100.0
    elif scale == "/10":
        value /= 10.0
    return value if 0.0 <= value <= 1.0 else None


@component
class QualityGate(MovedSettings, ChatGeneratorSerialization):
    """
    Scores the retrieved documents against the original question and routes to `retry` or `done`.

    The score (0..1) mixes, by default without any LLM, with `weights`:
    - `best_dense`: the best dense (cosine) score among the documents, mapped linearly from `dense.range` onto 0..1,
    - `mean_dense`: the mean of the `top_n` best dense scores, mapped the same way,
    - `coverage`: the share of the question's content terms (stopwords removed, stemmed) found in the first `top_n`
      documents.

    Weights whose signal is missing (no dense scores, or a question without content terms) are dropped and the rest
    renormalised. An optional LLM judge (`chat_generator`) rates the context 0..1 and is blended in with
    `judge.weight`.

    Every run appends `attempt_{n}_score_{s:.2f}` to the path and `{"attempt", "query", "score"}` to
    `state["attempts"]`. Then: score >= threshold -> `done` (passed); else if `attempt < max_retries` -> `retry` with
    `attempt` incremented (the weak `documents` stay, the rewriter uses them); else `max_retries_reached` -> `done`
    with the best attempt's documents, `status` `"partial"` and `fallback` True when even the best score is below
    `floor` (documents then emptied so nothing is generated from them). A request whose passages are the caller's
    own context (mode `constrained-context`) is not scored: it is `done` as it came.

    Usage:
    ```python
    from haystack import Document
    from gatehouse.components.quality.quality_gate import QualityGate
    from gatehouse.components.state import new_state

    gate = QualityGate(default_threshold=0.6, max_retries=2)
    docs = [Document(content="To rotate an API key open Settings > API keys.", meta={"dense_score": 0.8})]
    out = gate.run(state=new_state("How do I rotate an API key?", documents=docs))
    # {"done": {..., "quality_score": 1.0, "path": ["start", "attempt_0_score_1.00"]}}
    ```
    """

    moved_settings: ClassVar[dict[str, str]] = MOVED_SETTINGS

    def __init__(
        self,
        *,
        default_threshold: float = 0.6,
        floor: float = 0.40,
        max_retries: int = 2,
        top_n: int = 3,
        weights: dict[str, float] | None = None,
        dense: dict[str, Any] | None = None,
        coverage: dict[str, Any] | None = None,
        chat_generator: Any = None,
        judge: dict[str, Any] | None = None,
    ) -> None:
        """
        :param default_threshold: Pass threshold when the state carries none (the router sets `state["threshold"]`).
        :param floor: Global floor: when retries are exhausted and the best score is below it, `fallback` is True.
        :param max_retries: Retries after the first attempt (attempts are numbered from 0).
        :param top_n: How many documents the mean dense score, the term coverage and the LLM judge look at.
        :param weights: Weight of each signal (`DEFAULT_WEIGHTS` when None); a signal left out weighs 0.
        :param dense: How the dense signals are read (keys and defaults: `DENSE_DEFAULTS`).
        :param coverage: How the question's term coverage is counted (keys and defaults: `COVERAGE_DEFAULTS`).
        :param chat_generator: Optional Haystack chat generator used as an LLM judge; None (default) disables it.
        :param judge: The LLM judge's settings (keys and defaults: `JUDGE_DEFAULTS`).
        :raises ValueError: On weights, ranges or limits out of bounds, or a setting a group does not have.
        """
        _check_limits(max_retries=max_retries, top_n=top_n)
        self.default_threshold = default_threshold
        self.floor = floor
        self.max_retries = max_retries
        self.top_n = top_n
        self.weights = _signal_weights(weights)
        self.dense = _dense_settings(dense)
        self.coverage = setting_group("coverage", coverage, COVERAGE_DEFAULTS)
        self.chat_generator = chat_generator
        self.judge = _judge_settings(judge)
        self._terms = TermNormaliser(self.coverage["stopwords"], self.coverage["stemmer_language"],
                                     self.coverage["min_term_length"])

    def warm_up(self) -> None:
        """Warm up the optional chat generator."""
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def _dense(self, value: float) -> float:
        low, high = self.dense["range"]
        return min(1.0, max(0.0, (float(value) - low) / (high - low)))

    def _document_text(self, document: Document) -> str:
        fields = self.coverage["meta_fields"]
        parts = [str(document.meta.get(field) or "") for field in (["title", "section"] if fields is None else fields)]
        parts.append(document.content or "")
        return "\n".join(p for p in parts if p)

    def _question_similarities(self, question: str, documents: list[Document]) -> list[float]:
        """Cosine similarity of the question itself to each document (the stored scores were for another query)."""
        backend = EmbeddingBackend.get(model=self.dense["embedding_model"], cache_dir=self.dense["cache_dir"])
        vectors = backend.embed([question] + [self._document_text(d) for d in documents])
        return [float(v) for v in vectors[1:] @ vectors[0]]

    def signals(
        self, question: str, documents: list[Document], rescore: bool = False
    ) -> dict[str, float | None]:
        """
        The heuristic signals and their mix for a question and documents (no LLM).

        :param question: The question to score against.
        :param documents: The retrieved documents, best first.
        :param rescore: Compute the question's own cosine similarity to the documents instead of reading the
            retriever's `dense_score` (needed when the retrieval query was a rewrite, whose expansion terms
            would otherwise inflate the score of unrelated results).
        :returns: `best_dense`, `mean_dense`, `coverage` (each None when unavailable) and `heuristic` (0..1).
        """
        if rescore and documents:
            dense_values = sorted(self._question_similarities(question, documents), reverse=True)
        else:
            key = self.dense["score_key"]
            dense_values = sorted(
                (float(d.meta[key]) for d in documents if isinstance(d.meta.get(key), (int, float))), reverse=True
            )
        best_dense = self._dense(dense_values[0]) if dense_values else None
        top_dense = [self._dense(v) for v in dense_values[: self.top_n]]
        mean_dense = sum(top_dense) / len(top_dense) if top_dense else None

        question_terms = set(self._terms.terms(question))
        coverage: float | None = None
        if question_terms and documents:
            found: set[str] = set()
            for document in documents[: self.top_n]:
                found.update(self._terms.terms(self._document_text(document)))
            coverage = len(question_terms & found) / len(question_terms)

        weighted = [
            (best_dense, self.weights["best_dense"]),
            (mean_dense, self.weights["mean_dense"]),
            (coverage, self.weights["coverage"]),
        ]
        total_weight = sum(w for value, w in weighted if value is not None)
        heuristic = (
            sum(value * w for value, w in weighted if value is not None) / total_weight if total_weight > 0 else 0.0
        )
        if not documents:
            heuristic = 0.0
        return {"best_dense": best_dense, "mean_dense": mean_dense, "coverage": coverage, "heuristic": heuristic}

    def _judge(self, question: str, documents: list[Document],
               deadline: float | None) -> tuple[float | None, str | None]:
        context = "\n\n".join(d.content or "" for d in documents[: self.top_n])[: self.judge["max_context_chars"]]
        prompt = self.judge["prompt"].replace("{question}", question).replace("{context}", context)
        try:
            reply = ask_chat_generator(self.chat_generator, prompt, deadline=deadline)
        except Exception as error:  # noqa: BLE001 - any generator failure falls back to the heuristic score
            return None, f"quality_gate: LLM judge failed ({type(error).__name__}: {error}); heuristic score used"
        rating = parse_relevance(reply)
        if rating is None:
            return None, f"quality_gate: LLM judge reply not a rating ({reply[:80]!r}); heuristic score used"
        return rating, None

    @component.output_types(retry=State, done=State)
    def run(self, state: State, max_retries: int | None = None,
            deadline: float | None = None) -> dict[str, dict[str, Any]]:
        """
        Score the latest attempt and route the state.

        :param state: The request state; reads `documents`, `condensed_query` / `original_query` / `query`,
            `threshold`, `attempt`, `attempts`, `best_score`, `best_documents`.
        :param max_retries: This request's retries, in place of the setting (a plan's parts are retried once).
        :param deadline: `time.monotonic()` by which the request must be answered (the LLM judge's call fits in it).
        :returns: Exactly one of `retry` or `done`, holding the new state.
        """
        if state.get("mode") == "constrained-context":
            return {"done": state}
        max_retries = self.max_retries if max_retries is None else max_retries
        started = time.perf_counter()
        documents: list[Document] = list(state.get("documents") or [])
        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        attempt = int(state.get("attempt") or 0)
        threshold = state.get("threshold")
        threshold = float(threshold) if threshold is not None else float(self.default_threshold)

        rescore = self.dense["rescore_rewritten"] and str(state.get("query") or "") != question
        signals = self.signals(question, documents, rescore=rescore)
        score = signals["heuristic"] or 0.0
        warning = None
        if self.chat_generator is not None and documents:
            rating, warning = self._judge(question, documents, deadline)
            signals["llm"] = rating
            if rating is not None:
                score = (1.0 - self.judge["weight"]) * score + self.judge["weight"] * rating
        score = round(min(1.0, max(0.0, score)), 2)

        attempts = list(state.get("attempts") or [])
        attempts.append({"attempt": attempt, "query": state.get("query"), "score": score})
        previous_best = state.get("best_score")
        if previous_best is None or score > float(previous_best):
            best_score, best_documents, best_attempt = score, documents, attempt
        else:
            best_score = float(previous_best)
            best_documents = list(state.get("best_documents") or [])
            best_attempt = state.get("best_attempt")
        common = {
            "attempts": attempts,
            "quality_score": score,
            "quality_signals": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in signals.items()},
            "threshold": threshold,
            "best_score": best_score,
            "best_documents": best_documents,
            "best_attempt": best_attempt,
        }
        steps = [f"attempt_{attempt}_score_{score:.2f}"]
        base = with_validation(state, "confidence_warnings", warning) if warning else state

        if score >= threshold:
            new = advance(base, stage="quality_gate", started=started, steps=steps, fallback=False, **common)
            return {"done": new}
        if attempt < max_retries:
            new = advance(base, stage="quality_gate", started=started, steps=steps, attempt=attempt + 1, **common)
            return {"retry": new}

        fallback = best_score < self.floor
        common["quality_score"] = best_score
        new = advance(
            base,
            stage="quality_gate",
            started=started,
            steps=[*steps, "max_retries_reached"],
            fallback=fallback,
            status="partial",
            documents=[] if fallback else best_documents,
            **common,
        )
        return {"done": new}


def _check_limits(*, max_retries: int, top_n: int) -> None:
    """Raise a ValueError naming `max_retries` below 0 or `top_n` below 1."""
    if max_retries < 0:
        raise ValueError("max_retries must be >= 0.")
    if top_n < 1:
        raise ValueError("top_n must be >= 1.")


def _signal_weights(weights: dict[str, float] | None) -> dict[str, float]:
    """Every signal's weight: `DEFAULT_WEIGHTS` for None, else the given ones (a signal left out weighs 0)."""
    unknown = sorted(set(weights or {}) - set(DEFAULT_WEIGHTS))
    if unknown:
        raise ValueError(f"Unknown quality signals {unknown} in 'weights'; use {', '.join(DEFAULT_WEIGHTS)}.")
    given = DEFAULT_WEIGHTS if weights is None else weights
    complete = {name: float(given.get(name, 0.0)) for name in DEFAULT_WEIGHTS}
    if min(complete.values()) < 0 or sum(complete.values()) <= 0:
        raise ValueError("The score weights must be >= 0 and not all zero.")
    return complete


def _dense_settings(dense: dict[str, Any] | None) -> dict[str, Any]:
    """The complete `dense` settings, `range` as two floats."""
    settings = setting_group("dense", dense, DENSE_DEFAULTS)
    if len(settings["range"]) != 2 or float(settings["range"][1]) <= float(settings["range"][0]):
        raise ValueError("dense.range must be [low, high] with high > low.")
    return {**settings, "range": [float(settings["range"][0]), float(settings["range"][1])]}


def _judge_settings(judge: dict[str, Any] | None) -> dict[str, Any]:
    """The complete `judge` settings."""
    settings = setting_group("judge", judge, JUDGE_DEFAULTS)
    if not 0.0 <= settings["weight"] <= 1.0:
        raise ValueError("judge.weight must be between 0 and 1.")
    return settings
