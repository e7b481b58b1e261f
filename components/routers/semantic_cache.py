"""
The answer cache of `ask.yml`: a question asked again (or a paraphrase of it) is answered from memory, skipping intent,
routing, retrieval and generation.

Two components share one cache: `SemanticCache` (`cache_lookup`, after the condenser) answers a hit and hands a miss on,
with a `CacheTicket`, to `SemanticCacheStore` (`cache_store`, after the output guardrails), which stores the finished
answer when it is worth repeating. The cache lives in the lookup component's memory, per loaded pipeline and process.
"""

import re
import threading
import time
import unicodedata
from collections import OrderedDict
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import numpy as np
from haystack import component, logging

from gatehouse.components.builders.response_builder import FINAL_STATUSES
from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.routers.tiered_classifier import normalize_text
from gatehouse.components.state import PUBLIC_TENANT, State, advance, with_validation
from gatehouse.components.text import DEFAULT_STOPWORDS, stem
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

logger = logging.getLogger(__name__)

CACHED_MODE = "full-corpus"
#: The state keys of a finished answer that a hit puts back (what the response is built from).
RESTORED_KEYS = (
    "answer", "citations", "status", "intent", "intent_tier", "route", "decision_tier", "decision_reason", "kbs",
    "route_reason", "chunks_retrieved", "chunks_used", "attempts", "quality_score", "generator", "citation_coverage",
    "plan",
)
#: Validation records about the answer itself, kept with it (the output guardrails run again on a hit).
RESTORED_VALIDATION = ("boundary_violations", "confidence_warnings", "unsupported_sentences")

_WORD = re.compile(r"\w(?:[\w\-./]*\w)?")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;])\s*$")

Partition = tuple[str, tuple[str, ...] | None]  # (tenant, the KBs asked for or None when routed)


def normalise_question(text: str) -> str:
    """
    The exact-match form of a question: NFKC, case-folded, punctuation turned into spaces, whitespace collapsed.

    :param text: The question.
    :returns: Its normalised form (`"How do I rotate an API key?"` -> `"how do i rotate an api key"`).
    """
    text = unicodedata.normalize("NFKC", text or "").casefold()
    return " ".join("".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text).split())


def _words(text: str) -> list[tuple[str, bool]]:
    """The words of a text (inner `-`, `.`, `/` kept: `v2-large`, `3.4`), each with "starts a sentence"."""
    text = unicodedata.normalize("NFKC", text or "")
    return [(m.group(), _SENTENCE_START.search(text, 0, m.start()) is not None) for m in _WORD.finditer(text)]


def _fold(word: str) -> str:
    """A word as key terms are compared: case-folded, and stemmed when it is only letters (`Agreements`)."""
    word = word.casefold()
    return stem(word) if word.isalpha() else word


def folded_words(text: str) -> frozenset[str]:
    """Every word of a text as `_fold` compares it."""
    return frozenset(_fold(word) for word, _ in _words(text))


#: Words that turn a question's meaning around: with one in a question and not in the other, they differ.
_NEGATION = re.compile(r"n['’]t\b|\b(?:not|no|never|without|cannot|none|neither|nor)\b", re.IGNORECASE)


#: Function words that still change what is asked: order in time, how many, direction ("before / after the first
#: deployment", "one / every endpoint", "up / down"). `meaning` keeps them although they are stopwords.
_BEARING = frozenset(
    "above after all any before below both down each either every first from into last least less more most off "
    "on one only out over some to under up with".split()
)


def meaning(text: str) -> tuple[frozenset[str], int]:
    """
    What a semantic match must agree on: the question's content words (case-folded, stemmed; function words left
    out except those in `_BEARING`, so "How do I / How can I rotate a key" agree) and how many negations it has
    ("Can I" / "Can't I" do not).

    :param text: The question.
    :returns: `(content words, number of negations)`.
    """
    words = frozenset(_fold(word) for word, _ in _words(text)
                      if word.casefold() in _BEARING or word.casefold() not in DEFAULT_STOPWORDS)
    return words, len(_NEGATION.findall(unicodedata.normalize("NFKC", text or "")))


def key_terms(text: str) -> frozenset[str]:
    """
    The words of a question that name one thing among similar ones, case-folded: words with a digit (`P1`, `3.2`,
    `model-1`), with an inner `-`, `.` or `/` (`eu-west`, `/healthz`), with a capital after the first letter (`MySQL`,
    `HTTPS`) or capitalised inside a sentence (`Team`, `Business`). Two questions whose embeddings are close but whose
    key terms differ ("the basic tier" / "the premium tier") ask about different things.

    :param text: The question.
    :returns: Its key terms, case-folded (and stemmed when only letters).
    """
    terms = set()
    for word, starts_sentence in _words(text):
        digit_or_inner = any(ch.isdigit() or ch in "-./" for ch in word)
        capitals = any(ch.isupper() for ch in word[1:]) or (word[0].isupper() and not starts_sentence and word != "I")
        if digit_or_inner or capitals:
            terms.add(_fold(word))
    return frozenset(terms)


def requested_kbs(kb: Any) -> tuple[str, ...] | None:
    """The knowledge bases a request names (`"faq"`, `"faq,ops"` or a list), in order; None when it names none."""
    if not kb:
        return None
    items = [kb] if isinstance(kb, str) else [str(item) for item in kb]
    names = [name.strip() for item in items for name in item.split(",") if name.strip()]
    return tuple(dict.fromkeys(names)) or None


@dataclass
class _Entry:
    """A stored answer, the question it answers and what it was built from."""

    question: str  # normalised
    terms: frozenset[str]  # key terms of the question
    words: frozenset[str]  # all its words (folded_words)
    sense: tuple[frozenset[str], int]  # its content words and negations (meaning)
    embedding: np.ndarray
    answer: dict[str, Any]  # RESTORED_KEYS of the finished state
    validation: dict[str, list[str]]  # RESTORED_VALIDATION records added after the lookup
    tenants: tuple[str, ...]  # whose documents it may be built from
    kbs: tuple[str, ...] | None  # which KBs it depends on; None: every KB of `tenants` (a routed question)
    stamp: dict[tuple[str, str], int]  # the store's write counters of those (tenant, kb) when the request began
    created: float  # time.monotonic()


@dataclass(frozen=True)
class CacheTicket:
    """What `cache_lookup` hands `cache_store` for a miss: the cache, the request's key and the counters it began with."""

    cache: "SemanticCache"
    partition: Partition
    question: str  # normalised
    text: str  # the question as asked (key terms, embedding)
    embedding: np.ndarray | None  # computed by the lookup when it had entries to compare with
    counters: dict[tuple[str, str], int]
    validation_counts: dict[str, int]  # length of each validation list at the lookup

    def __deepcopy__(self, memo: dict[int, Any]) -> "CacheTicket":
        # Immutable, and it must reach cache_store with the very cache it came from (the pipeline copies inputs).
        return self


def depends_on(counters: dict[tuple[str, str], int], tenants: tuple[str, ...],
               kbs: tuple[str, ...] | None) -> dict[tuple[str, str], int]:
    """The counters of the (tenant, kb) pairs an answer depends on: `kbs` of `tenants`, or every KB of them."""
    return {pair: value for pair, value in counters.items()
            if pair[0] in tenants and (kbs is None or pair[1] in kbs)}


@component
class SemanticCache:
    """
    Answers a repeated question from memory (`cache_lookup` in `ask.yml`); its `SemanticCacheStore` fills it.

    Only full-corpus requests are cached: constrained-context and hybrid requests carry the caller's text and always
    miss. The key is the tenant, the knowledge bases the request names (or none: routed) and the question: an exact
    match of `normalise_question` is a hit without embedding; otherwise the question's embedding is compared with the
    stored ones of the same tenant and KBs, and one at `similarity_threshold` or above whose key terms (`key_terms`:
    names, versions, error codes, regions) and meaning (`meaning`: the same content words, the same negations, so
    "enable" / "disable", "with" / "without", "admin" / "member" never match) are the same is a hit. Never across
    tenants.

    An entry expires after `ttl_s`, the least recently used goes beyond `max_entries`, and an entry is dropped as soon
    as any document of a KB it depends on is written or deleted, by this process or another (`gatehouse ingest`,
    `kb delete`, `ingest --prune`): the lexical store keeps a write counter per (tenant, kb), and an entry remembers
    the counters of its KBs from when its request began. It depends on the KBs it names, of its tenant and the
    public tenant; a routed question (no KB named) on every KB of those two tenants, since new documents anywhere can
    change the routing. With Elasticsearch as the lexical backend there are no counters and the cache stays off.

    Usage example:
    ```python
    from gatehouse.components.routers.semantic_cache import SemanticCache, SemanticCacheStore
    from gatehouse.components.state import new_state
    from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

    lookup = SemanticCache(similarity_threshold=0.92, max_entries=1000, ttl_s=3600,
                           document_store=LexicalDocumentStore())
    result = lookup.run(state=new_state("How do I rotate an API key?"))      # {"miss": state, "ticket": ticket}
    # ... the pipeline answers; then, with the finished state:
    SemanticCacheStore().run(state=finished_state, ticket=result["ticket"])
    lookup.run(state=new_state("how do I rotate an API key"))["hit"]["answer"]
    ```
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        similarity_threshold: float = 0.92,
        max_entries: int = 1000,
        ttl_s: float = 3600.0,
        cache_partial: bool = False,
        document_store: LexicalDocumentStore | None = None,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        """
        Create the cache.

        :param enabled: False passes every request on untouched (`cache_store` then stores nothing).
        :param similarity_threshold: Cosine similarity of two questions' embeddings (0..1] from which a stored answer
            answers a paraphrase (when their key terms agree too).
        :param max_entries: The most answers kept; the least recently used one goes first.
        :param ttl_s: Seconds an answer is served after it was stored.
        :param cache_partial: Also store answers with status `partial` (by default only `success`).
        :param document_store: The lexical store whose per-KB write counters (`kb_generations`) invalidate answers;
            None: answers expire only by `ttl_s`.
        :param embedding_model: Embedding model for `EmbeddingBackend.get`; None uses the configured default.
        :param cache_dir: Embedding cache directory; None (default) uses the configured one, as the intent gate and the
            router do: they embed the same normalised question, so a miss's embedding is computed once; `"off"`
            disables it.
        :raises ValueError: If a number is out of range.
        """
        if isinstance(similarity_threshold, bool) or not 0 < float(similarity_threshold) <= 1:
            raise ValueError(f"'similarity_threshold' must be in (0, 1], got {similarity_threshold!r}.")
        if isinstance(max_entries, bool) or int(max_entries) < 1:
            raise ValueError(f"'max_entries' must be at least 1, got {max_entries!r}.")
        if isinstance(ttl_s, bool) or float(ttl_s) <= 0:
            raise ValueError(f"'ttl_s' must be a positive number of seconds, got {ttl_s!r}.")
        self.enabled = bool(enabled)
        self.similarity_threshold = float(similarity_threshold)
        self.max_entries = int(max_entries)
        self.ttl_s = float(ttl_s)
        self.cache_partial = bool(cache_partial)
        self.document_store = document_store
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.active = self.enabled and (document_store is None or document_store.active_backend == "local")
        if self.enabled and not self.active:
            logger.warning("The answer cache is off: it needs the local store's write counters and the lexical "
                           "backend is {backend}.", backend=document_store.active_backend)
        self._entries: dict[Partition, dict[str, _Entry]] = {}
        self._recency: OrderedDict[tuple[Partition, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self._backend: EmbeddingBackend | None = None

    def warm_up(self) -> None:
        """Load the embedding model (when the cache is on)."""
        if self.active and self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.cache_dir)

    def __len__(self) -> int:
        """The number of stored answers."""
        return len(self._recency)

    def embed(self, text: str) -> np.ndarray:
        """The L2-normalised embedding of a question."""
        self.warm_up()
        assert self._backend is not None
        return self._backend.embed([normalize_text(text)])[0]

    def counters(self) -> dict[tuple[str, str], int]:
        """The lexical store's write counter per (tenant, kb), of any process (empty without a store)."""
        return self.document_store.store.kb_generations() if self.document_store is not None else {}

    @component.output_types(hit=State, miss=State, ticket=CacheTicket)
    def run(self, state: State) -> dict[str, Any]:
        """
        Look the request's question up.

        :param state: The request state after the condenser; reads `query`, `tenant`, `kb`, `mode`.
        :returns: `{"hit": state}` with the stored answer's keys restored (answer, citations, status, intent, route,
            kbs, chunk counts, attempts, quality score, generator), a `cache_hit` step and `cache` (status `hit`,
            `age_s`, `match` exact or semantic, `similarity`); or `{"miss": state, "ticket": ticket}` with `cache`
            status `miss` (the ticket lets `cache_store` store the answer); or `{"miss": state}` untouched when the
            cache is disabled, with `cache` status `skipped` and a `reason` when the request is not cacheable.
        """
        if not self.enabled:
            return {"miss": state}
        started = time.perf_counter()
        mode = state.get("mode") or CACHED_MODE
        text = str(state.get("query") or "")
        question = normalise_question(text)
        reason = ("the lexical backend has no write counters" if not self.active
                  else f"{mode} requests are never cached" if mode != CACHED_MODE
                  else "empty question" if not question else None)
        if reason:
            return {"miss": advance(state, stage="cache", started=started, cache={"status": "skipped",
                                                                                  "reason": reason})}
        partition: Partition = (str(state.get("tenant") or PUBLIC_TENANT), requested_kbs(state.get("kb")))
        counters = self.counters()
        entry, similarity, embedding = self._find(partition, question, text, counters)
        if entry is None:
            validation = state.get("validation") or {}
            ticket = CacheTicket(self, partition, question, text, embedding, counters,
                                 {key: len(validation.get(key, [])) for key in RESTORED_VALIDATION})
            return {"miss": advance(state, stage="cache", started=started, cache={"status": "miss"}), "ticket": ticket}
        restored = deepcopy(entry.answer)
        record = {"status": "hit", "age_s": round(time.monotonic() - entry.created, 3),
                  "match": "exact" if entry.question == question else "semantic", "similarity": round(similarity, 4)}
        hit = advance(state, stage="cache", started=started, steps=["cache_hit"], cache=record, **restored)
        for key, items in entry.validation.items():
            if items:
                hit = with_validation(hit, key, *items)
        return {"hit": hit}

    def _valid(self, entry: _Entry, counters: dict[tuple[str, str], int]) -> bool:
        return (time.monotonic() - entry.created <= self.ttl_s
                and depends_on(counters, entry.tenants, entry.kbs) == entry.stamp)

    def _find(self, partition: Partition, question: str, text: str, counters: dict[tuple[str, str], int]
              ) -> tuple[_Entry | None, float, np.ndarray | None]:
        """The valid entry answering `question` (exact, else the most similar one that qualifies); drops stale ones."""
        with self._lock:
            entries = dict(self._entries.get(partition, {}))
        stale = [entry for entry in entries.values() if not self._valid(entry, counters)]
        self._drop(partition, [entry.question for entry in stale])
        for entry in stale:
            entries.pop(entry.question)
        exact = entries.get(question)
        if exact is not None:
            self._touch(partition, question)
            return exact, 1.0, None
        if not entries:
            return None, 0.0, None
        embedding = self.embed(text)
        candidates = list(entries.values())
        similarities = np.stack([entry.embedding for entry in candidates]) @ embedding
        terms, words, sense = key_terms(text), folded_words(text), meaning(text)
        best, best_similarity = None, 0.0
        for entry, similarity in zip(candidates, similarities.tolist()):
            shared = terms | entry.terms
            if similarity >= max(self.similarity_threshold, best_similarity) and shared <= words and \
                    shared <= entry.words and sense == entry.sense:
                best, best_similarity = entry, similarity
        if best is not None:
            self._touch(partition, best.question)
        return best, best_similarity, embedding

    def _touch(self, partition: Partition, question: str) -> None:
        with self._lock:
            if (partition, question) in self._recency:
                self._recency.move_to_end((partition, question))

    def _drop(self, partition: Partition, questions: list[str]) -> None:
        with self._lock:
            for question in questions:
                self._entries.get(partition, {}).pop(question, None)
                self._recency.pop((partition, question), None)
            if partition in self._entries and not self._entries[partition]:
                del self._entries[partition]

    def worth_storing(self, state: State) -> bool:
        """
        Whether a finished state is an answer worth repeating: retrieved (not a direct answer, refusal or error),
        with an answer and citations, not the fallback, and `success` (or `partial` with `cache_partial`).
        """
        validation = state.get("validation") or {}
        partial = state.get("status") == "partial" or bool(validation.get("unsupported_sentences"))
        return (state.get("route") == "retrieve" and state.get("status") not in FINAL_STATUSES
                and not state.get("fallback") and bool((state.get("answer") or "").strip())
                and bool(state.get("citations")) and (self.cache_partial or not partial))

    def store(self, ticket: CacheTicket, state: State) -> bool:
        """
        Store the finished answer of a missed request, when it is worth repeating.

        :param ticket: The lookup's ticket of the request.
        :param state: The finished state (after the output guardrails).
        :returns: Whether it was stored.
        """
        if not self.worth_storing(state):
            return False
        tenant, kbs = ticket.partition
        tenants = tuple(dict.fromkeys((tenant, PUBLIC_TENANT)))
        validation = state.get("validation") or {}
        entry = _Entry(
            question=ticket.question,
            terms=key_terms(ticket.text),
            words=folded_words(ticket.text),
            sense=meaning(ticket.text),
            embedding=ticket.embedding if ticket.embedding is not None else self.embed(ticket.text),
            answer=deepcopy({key: state[key] for key in RESTORED_KEYS if key in state}),  # type: ignore[literal-required]
            validation={key: list(validation.get(key, []))[ticket.validation_counts.get(key, 0):]
                        for key in RESTORED_VALIDATION},
            tenants=tenants,
            kbs=kbs,
            stamp=depends_on(ticket.counters, tenants, kbs),
            created=time.monotonic(),
        )
        with self._lock:
            self._entries.setdefault(ticket.partition, {})[ticket.question] = entry
            self._recency[(ticket.partition, ticket.question)] = None
            self._recency.move_to_end((ticket.partition, ticket.question))
            while len(self._recency) > self.max_entries:
                (partition, question), _ = self._recency.popitem(last=False)
                self._entries[partition].pop(question, None)
                if not self._entries[partition]:
                    del self._entries[partition]
        return True


@component
class SemanticCacheStore:
    """
    Stores a finished answer in the cache its request missed (`cache_store` in `ask.yml`, after the output guardrails).

    It takes the `ticket` of `SemanticCache` (the cache, the request's key and the store's write counters when the
    request began) and passes the state on with `cache.stored` set; without a ticket (a hit, an uncached request or
    one that ended before the lookup) the state passes untouched.

    Usage example:
    ```python
    from gatehouse.components.routers.semantic_cache import SemanticCacheStore

    state = SemanticCacheStore().run(state=finished_state, ticket=ticket)["state"]   # state["cache"]["stored"]
    ```
    """

    def __init__(self) -> None:
        """Create the component; what is stored is set on `SemanticCache`."""

    @component.output_types(state=State)
    def run(self, state: State, ticket: CacheTicket | None = None) -> dict[str, State]:
        """
        Store the answer of `state` when it is worth repeating (see `SemanticCache.worth_storing`).

        :param state: The finished state.
        :param ticket: The lookup's ticket; None passes the state on untouched.
        :returns: `{"state": state}`, with `cache.stored` (True or False) when there was a ticket.
        """
        if ticket is None:
            return {"state": state}
        started = time.perf_counter()
        stored = ticket.cache.store(ticket, state)
        return {"state": advance(state, stage="cache", started=started,
                                 cache={**(state.get("cache") or {}), "stored": stored})}
