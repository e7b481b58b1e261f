"""
The request state that travels through `ask.yml`.

Every gate of the ask pipeline takes one `state: State` and emits it (a new state, never the input changed) on
exactly one of its named routes. Keeping one state object makes the path, the attempts and the per-stage latency
trivial to record, and lets a branch end anywhere and still build a complete response.

Haystack copies every input before it hands it to a component. A `State` copies as a new mapping of the same values
(a few dozen references), not value by value: the values are shared, which is safe because no component changes a
value in place (`advance` and `with_validation` build the new lists and mappings they extend). Documents are shared
the same way.
"""

import time
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from haystack import Document

from gatehouse.settings import PUBLIC_TENANT  # the tenant of shared documents (defined where the CLI reads it cheaply)

#: The answer when a question ends without a supported answer: every gate that can end it so gives this one message
#: (each has a `fallback_message` setting to change it).
FALLBACK_MESSAGE = "I couldn't locate specific documentation for this. Please verify the query or contact support."


class State(MutableMapping[str, Any]):
    """
    The request state: a mapping of the keys below. Only `query` is always present; `new_state` sets the request's keys
    and the records. Copying it (Haystack's deep copy of a component's inputs included) gives a new mapping of the
    same values.
    """

    __slots__ = ("_data",)

    # The request (RequestIntake, then the input guardrails redact and normalise).
    query: str  # the current query: redacted, condensed, rewritten on retries
    original_query: str  # the user's question after the input guardrails
    tenant: str  # whose documents may be read; "public" when none is given
    kb: str | None  # a knowledge base the caller asked for explicitly
    mode: str  # full-corpus | constrained-context | hybrid
    context: str | None  # caller-provided text for the constrained and hybrid modes
    history: list[dict[str, Any]]  # earlier turns, {"role", "content"}
    started: float  # time.perf_counter() when the request was taken in (the response's total latency)
    # The condenser (QueryCondenser).
    condensed_query: str  # the standalone question made of a follow-up
    # The answer cache (SemanticCache before the intent gate, SemanticCacheStore after the output guardrails).
    cache: dict[str, Any]  # status: hit | miss | skipped (with a reason); a hit adds age_s, match (exact |
    # semantic) and similarity, and restores the stored answer's keys; cache_store adds stored (True | False)
    # The intent gate.
    intent: str  # one of the gate's intents
    intent_tier: str | None  # which tier chose the intent (keywords, patterns, embedding, llm, default, empty)
    route: str  # retrieve | direct | refuse
    decision_tier: str | None  # which tier chose the route
    decision_reason: str | None  # why, in words
    route_similarity: dict[str, float]  # the embedding tier's similarity per route, when it decided
    # RequestIntake: the caller's context as a document (the only passage in constrained-context mode; before the
    # retrieved ones in hybrid mode).
    context_documents: list[Document]
    # The planner (QueryPlanner, SearchPipeline, AnswerPipeline, PlanSynthesizer): a multi-part question's plan.
    plan: dict[str, Any] | None  # strategy, question, current (the part being answered), wall_ms, slowest_ms and
    # parts: index, query, label, status (planned | retrieved | missing | answered), score, kbs, replanned,
    # replan_query, ms, documents; answered parts add answer, citations, passages; missing ones a reason
    # The KB router.
    kbs: list[str]  # the knowledge bases to search
    threshold: float  # their quality threshold (the strictest of them)
    route_scores: dict[str, float]  # the router's score per candidate KB
    route_evidence: dict[str, float]  # best document score per KB when the evidence tier decided (KBEvidence)
    route_reason: str  # which tier decided
    route_pending: dict[str, Any] | None  # the candidate KBs the first search attempt chooses among (KBEvidence)
    # Retrieval (RetrievalRequest -> RetrievalPipeline -> RetrievalResult) and the quality loop (search.yml).
    retrieval_started: float  # time.perf_counter() when this attempt's retrieval started
    documents: list[Document]  # the latest attempt's documents (the quality gate keeps the best attempt's)
    chunks_retrieved: int
    attempt: int  # retrieval attempt number, 0-based
    attempts: list[dict[str, Any]]  # {"query", "score"} per attempt
    rewrites: list[dict[str, Any]]  # the retry rewriter's rewrites
    quality_score: float  # the quality gate's score of the best attempt
    quality_signals: dict[str, Any]  # the quality gate's signals behind that score
    best_score: float
    best_documents: list[Document]
    best_attempt: int
    fallback: bool  # True when the answer is the fallback message
    fallback_reason: str  # why it is (set by the gate that gave up)
    # Passage assembly and the answerability gate.
    passages: list[Document]  # what the generator sees, each with meta["source_id"] like "S1"
    chunks_used: int
    answerability: dict[str, Any]  # score, threshold, missing_terms, missing_entities, best candidate and signals
    answer_candidates: list[dict[str, Any]]  # ranked candidate sentences (source_id, passage, unit, text, score, span)
    # Generation and verification.
    generator: str  # which generator answered
    usage: dict[str, int]  # language-model tokens of the request, summed over its calls (LLMAnswerer adds the
    # server's reply usage): prompt_tokens, completion_tokens, total_tokens; reported as metadata.usage
    answer: str
    reply: Any  # a streamed answer the model is still to write: the generator's ReplyStream, then the verifier's
    # VerifiedReply, which the output guardrails follow (and replace by the answer)
    citations: list[dict[str, Any]]
    support: dict[str, Any]  # the citation verifier's verdict per sentence
    citation_coverage: float  # share of the answer's sentences that carry a valid citation
    status: str  # success | partial | fallback | refused | error (the response contract)
    error_message: str | None
    # Records kept along the way.
    path: list[str]  # ordered steps, e.g. start, route_to_faq, attempt_0_score_0.41
    latency_ms: dict[str, float]  # milliseconds per stage, summed when a stage runs more than once
    validation: dict[str, list[str]]  # boundary_violations, confidence_warnings, guardrail_actions,
    # unsupported_sentences

    def __init__(self, data: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        given = data._data if isinstance(data, State) else (data or {})  # a State's own dict: no key-by-key read
        self._data: dict[str, Any] = {**given, **fields}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._data == dict(other)

    def __repr__(self) -> str:
        return f"State({self._data!r})"

    def __or__(self, other: Mapping[str, Any]) -> "State":
        return State(self._data, **other)

    def __copy__(self) -> "State":
        return State(self._data)

    def __deepcopy__(self, memo: dict[int, Any]) -> "State":
        return State(self._data)


VALIDATION_KEYS = ("boundary_violations", "confidence_warnings", "guardrail_actions", "unsupported_sentences")


def new_state(query: str, **fields: Any) -> State:
    """
    Build a fresh state for `query` with empty path, latency and validation records.

    :param query: The user's question.
    :param fields: Any other state keys to set.
    :returns: A new state.
    """
    return State(
        {
            "query": query,
            "original_query": query,
            "tenant": PUBLIC_TENANT,
            "kb": None,
            "mode": "full-corpus",
            "context": None,
            "history": [],
            "attempt": 0,
            "attempts": [],
            "path": ["start"],
            "latency_ms": {},
            "validation": {key: [] for key in VALIDATION_KEYS},
        },
        **fields,
    )


def advance(
    state: State,
    *,
    stage: str | None = None,
    started: float | None = None,
    steps: list[str] | None = None,
    **updates: Any,
) -> State:
    """
    Return a copy of `state` with `updates` applied, `steps` appended to the path and the stage's time added.

    The input state is never modified: lists and dictionaries that this function extends are copied.

    :param state: The incoming state.
    :param stage: Stage name under which to record latency.
    :param started: `time.perf_counter()` value taken when the stage started.
    :param steps: Path entries to append.
    :param updates: Keys to set on the new state.
    :returns: The new state.
    """
    new = State(state)
    new["path"] = list(state.get("path", [])) + list(steps or [])
    new["latency_ms"] = dict(state.get("latency_ms", {}))
    if stage is not None and started is not None:
        elapsed = (time.perf_counter() - started) * 1000.0
        new["latency_ms"][stage] = round(new["latency_ms"].get(stage, 0.0) + elapsed, 3)
    new.update(updates)
    return new


def with_validation(state: State, key: str, *items: str) -> State:
    """
    Return a copy of `state` with `items` appended to `validation[key]`.

    :param state: The incoming state.
    :param key: One of `boundary_violations`, `confidence_warnings`, `guardrail_actions`, `unsupported_sentences`.
    :param items: Messages to record.
    :returns: The new state.
    :raises ValueError: If `key` is not a validation key.
    """
    if key not in VALIDATION_KEYS:
        raise ValueError(f"Unknown validation key '{key}'. Use one of {', '.join(VALIDATION_KEYS)}.")
    new = State(state)
    validation = {k: list(v) for k, v in (state.get("validation") or {k: [] for k in VALIDATION_KEYS}).items()}
    validation[key] = [*validation.get(key, []), *items]
    new["validation"] = validation
    return new
