"""
The answer cache of `ask.yml`: a question asked again (or a paraphrase of it) is answered from memory, skipping intent,
routing, retrieval and generation.

Two components share one cache: `SemanticCache` (`cache_lookup`, after the condenser) answers a hit and hands a miss on,
with a `CacheTicket`, to `SemanticCacheStore` (`cache_store`, after the output guardrails,
`gatehouse.components.cache.semantic_cache_store`), which stores the finished answer when it is worth repeating. The
cache lives in the lookup component's memory (`gatehouse.components.cache.answer_memory`), per loaded pipeline and
process.
"""

import time
from copy import deepcopy
from typing import Any

import numpy as np
from haystack import component, logging

from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.cache.answer_memory import RESTORED_VALIDATION, AnswerMemory, CacheTicket, Partition
from gatehouse.components.cache.question_keys import normalise_question
from gatehouse.components.tiered_classifier import normalize_text
from gatehouse.components.state import PUBLIC_TENANT, State, advance, with_validation
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

logger = logging.getLogger(__name__)

CACHED_MODE = "full-corpus"


def requested_kbs(kb: Any) -> tuple[str, ...] | None:
    """The knowledge bases a request names (`"faq"`, `"faq,ops"` or a list), in order; None when it names none."""
    if not kb:
        return None
    items = [kb] if isinstance(kb, str) else [str(item) for item in kb]
    names = [name.strip() for item in items for name in item.split(",") if name.strip()]
    return tuple(dict.fromkeys(names)) or None


def _check_settings(similarity_threshold: Any, max_entries: Any, ttl_s: Any) -> None:
    if isinstance(similarity_threshold, bool) or not 0 < float(similarity_threshold) <= 1:
        raise ValueError(f"'similarity_threshold' must be in (0, 1], got {similarity_threshold!r}.")
    if isinstance(max_entries, bool) or int(max_entries) < 1:
        raise ValueError(f"'max_entries' must be at least 1, got {max_entries!r}.")
    if isinstance(ttl_s, bool) or float(ttl_s) <= 0:
        raise ValueError(f"'ttl_s' must be a positive number of seconds, got {ttl_s!r}.")


def _counters_kept(enabled: bool, document_store: LexicalDocumentStore | None) -> bool:
    """Whether the cache can run: on, and with the local or PostgreSQL store's write counters (or no store); warns
    when not."""
    kept = document_store is None or document_store.active_backend in ("local", "postgres")
    if enabled and not kept:
        logger.warning("The answer cache is off: it needs the local or PostgreSQL store's write counters and the "
                       "lexical backend is {backend}.", backend=document_store.active_backend)
    return enabled and kept


@component
class SemanticCache:
    """
    Answers a repeated question from memory (`cache_lookup` in `ask.yml`); its `SemanticCacheStore` fills it.

    Only full-corpus requests are cached: constrained-context and hybrid requests carry the caller's text and always
    miss. The key is the tenant, the knowledge bases the request names (or none: routed) and the question
    (`gatehouse.components.cache.question_keys`): an exact match of `normalise_question` is a hit without
    embedding; otherwise the question's embedding is compared with the stored ones of the same tenant and KBs, and one
    at `similarity_threshold` or above whose key terms (`key_terms`: names, versions, error codes, regions) and
    meaning (`meaning`: the same content words, the same negations, so "enable" / "disable", "with" / "without",
    "admin" / "member" never match) are the same is a hit. Never across tenants.

    An entry expires after `ttl_s`, the least recently used goes beyond `max_entries`, and an entry is dropped as soon
    as any document of a KB it depends on is written or deleted, by this process or another (`gatehouse ingest`,
    `kb delete`, `ingest --prune`): the lexical store keeps a write counter per (tenant, kb), and an entry remembers
    the counters of its KBs from when its request began. It depends on the KBs it names, of its tenant and the
    public tenant; a routed question (no KB named) on every KB of those two tenants, since new documents anywhere can
    change the routing. PostgreSQL keeps the counters in the database, so every server's writes move them; with
    Elasticsearch as the lexical backend there are no counters and the cache stays off.

    Usage example:
    ```python
    from gatehouse.components.cache.semantic_cache import SemanticCache
    from gatehouse.components.cache.semantic_cache_store import SemanticCacheStore
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
        :param enabled: False passes every request on untouched (`cache_store` then stores nothing).
        :param similarity_threshold: Embedding cosine (0..1] from which a stored answer answers a paraphrase.
        :param max_entries: The most answers kept; the least recently used one goes first.
        :param ttl_s: Seconds an answer is served after it was stored.
        :param cache_partial: Also store answers with status `partial` (by default only `success`).
        :param document_store: The lexical store whose per-KB write counters invalidate answers; None: only `ttl_s`.
        :param embedding_model: Embedding model for `EmbeddingBackend.get`; None uses the configured default.
        :param cache_dir: Embedding cache directory; None: the configured one (shared by the gates), `"off"`: none.
        :raises ValueError: If a number is out of range.
        """
        _check_settings(similarity_threshold, max_entries, ttl_s)
        self.enabled = bool(enabled)
        self.similarity_threshold = float(similarity_threshold)
        self.max_entries = int(max_entries)
        self.ttl_s = float(ttl_s)
        self.cache_partial = bool(cache_partial)
        self.document_store = document_store
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.active = _counters_kept(self.enabled, document_store)
        self._memory = AnswerMemory(max_entries=self.max_entries, ttl_s=self.ttl_s, cache_partial=self.cache_partial,
                                    similarity_threshold=self.similarity_threshold, embed=self.embed)
        self._backend: EmbeddingBackend | None = None

    def warm_up(self) -> None:
        """Load the embedding model (when the cache is on)."""
        if self.active and self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.cache_dir)

    def __len__(self) -> int:
        """The number of stored answers."""
        return len(self._memory)

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
        entry, similarity, embedding = self._memory.find(partition, question, text, counters)
        if entry is None:
            validation = state.get("validation") or {}
            ticket = CacheTicket(self._memory, partition, question, text, embedding, counters,
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
