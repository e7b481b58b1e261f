"""
The answer cache's memory, shared by its two components: `SemanticCache` (`cache_lookup`) looks questions up in it
and hands a miss on with a `CacheTicket`; `SemanticCacheStore` (`cache_store`) stores the finished answer through
the ticket. The memory is plain Python, per loaded pipeline and process.

An entry is valid for `ttl_s` seconds and while the store's write counters of the KBs it depends on are as they were
when its request began; beyond `max_entries` the least recently used goes first.

Usage:
```python
from gatehouse.components.cache.answer_memory import AnswerMemory

memory = AnswerMemory(max_entries=1000, ttl_s=3600, similarity_threshold=0.92, cache_partial=False, embed=embed)
question = "How do I rotate an API key?"
entry, similarity, embedding = memory.find(("public", None), "how do i rotate an api key", question, counters={})
```
"""

import threading
import time
from collections import OrderedDict
from copy import deepcopy
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gatehouse.components.builders.response_builder import FINAL_STATUSES
from gatehouse.components.cache.question_keys import folded_words, key_terms, meaning
from gatehouse.components.state import PUBLIC_TENANT, State

#: The state keys of a finished answer that a hit puts back (what the response is built from).
RESTORED_KEYS = (
    "answer", "citations", "status", "intent", "intent_tier", "route", "decision_tier", "decision_reason", "kbs",
    "route_reason", "chunks_retrieved", "chunks_used", "attempts", "quality_score", "generator", "citation_coverage",
    "plan",
)
#: Validation records about the answer itself, kept with it (the output guardrails run again on a hit).
RESTORED_VALIDATION = ("boundary_violations", "confidence_warnings", "unsupported_sentences")

Partition = tuple[str, tuple[str, ...] | None]  # (tenant, the KBs asked for or None when routed)


@dataclass
class Entry:
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
    """What `cache_lookup` hands `cache_store` for a miss: the memory, the request's key, the counters it began with."""

    memory: "AnswerMemory"
    partition: Partition
    question: str  # normalised
    text: str  # the question as asked (key terms, embedding)
    embedding: np.ndarray | None  # computed by the lookup when it had entries to compare with
    counters: dict[tuple[str, str], int]
    validation_counts: dict[str, int]  # length of each validation list at the lookup

    def __deepcopy__(self, memo: dict[int, Any]) -> "CacheTicket":
        # Immutable, and it must reach cache_store with the very memory it came from (the pipeline copies inputs).
        return self


def depends_on(counters: dict[tuple[str, str], int], tenants: tuple[str, ...],
               kbs: tuple[str, ...] | None) -> dict[tuple[str, str], int]:
    """The counters of the (tenant, kb) pairs an answer depends on: `kbs` of `tenants`, or every KB of them."""
    return {pair: value for pair, value in counters.items()
            if pair[0] in tenants and (kbs is None or pair[1] in kbs)}


class AnswerMemory:
    """
    The stored answers of one cache, by partition and normalised question.

    :param max_entries: The most answers kept; the least recently used one goes first.
    :param ttl_s: Seconds an answer is served after it was stored.
    :param similarity_threshold: Embedding cosine from which a stored answer answers a paraphrase.
    :param cache_partial: Also store answers with status `partial`.
    :param embed: The L2-normalised embedding of a question.
    """

    def __init__(self, *, max_entries: int, ttl_s: float, similarity_threshold: float, cache_partial: bool,
                 embed: Callable[[str], np.ndarray]) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.similarity_threshold = similarity_threshold
        self.cache_partial = cache_partial
        self.embed = embed
        self._entries: dict[Partition, dict[str, Entry]] = {}
        self._recency: OrderedDict[tuple[Partition, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """The number of stored answers."""
        return len(self._recency)

    def _valid(self, entry: Entry, counters: dict[tuple[str, str], int]) -> bool:
        return (time.monotonic() - entry.created <= self.ttl_s
                and depends_on(counters, entry.tenants, entry.kbs) == entry.stamp)

    def find(self, partition: Partition, question: str, text: str, counters: dict[tuple[str, str], int]
             ) -> tuple[Entry | None, float, np.ndarray | None]:
        """
        The valid entry answering a question (exact, else the most similar one whose key terms and meaning agree);
        stale entries of the partition are dropped.

        :param partition: The request's tenant and KBs.
        :param question: The normalised question.
        :param text: The question as asked.
        :param counters: The store's write counters now.
        :returns: The entry (or None), its similarity, and the question's embedding when it was computed.
        """
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
        entry = Entry(
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
