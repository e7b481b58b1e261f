"""Hybrid search in one step: dense and BM25 lists, sentence re-scoring and score fusion, then the chunks kept."""

from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.components.embedders.vector import Vector
from gatehouse.components.joiners.fusion import Fusion
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.document_stores.dense_document_store import DenseDocumentStore
from gatehouse.document_stores.edge_document_store import EdgeDocumentStore
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

LISTS = ("dense", "lexical", "ngrams")

#: How the lists are fused (`Fusion`): `method` `weighted_sum` (normalised scores, weighted) or `rrf` (reciprocal
#: ranks), the `weights` of the lists (`dense`, `lexical`, `ngrams`; None: 0.6 / 0.2 / 0.2, or 0.6 / 0.4 without an
#: ngrams store), the `normalization` of `weighted_sum` (`max`, `minmax` or `zscore`) and the RRF rank constant `rrf_k`.
FUSION: dict[str, Any] = {"method": "weighted_sum", "weights": None, "normalization": "max", "rrf_k": 60}


def _fusion_settings(fusion: dict[str, Any] | None, ngrams_store: LexicalDocumentStore | None) -> dict[str, Any]:
    """The fusion settings with their defaults, the weights naming only the lists searched."""
    settings = setting_group("fusion", fusion, FUSION)
    default = {"dense": 0.6, "lexical": 0.2, "ngrams": 0.2} if ngrams_store else {"dense": 0.6, "lexical": 0.4}
    lists = dict(default if settings["weights"] is None else settings["weights"])
    unknown = sorted(set(lists) - set(LISTS)) + (["ngrams (no ngrams_store)"] if "ngrams" in lists and
                                                  ngrams_store is None else [])
    if unknown:
        raise ValueError(f"fusion.weights name lists this retriever does not search: {unknown}. "
                         f"Use {', '.join(LISTS)}.")
    return {**settings, "weights": lists}


@component
class HybridRetriever(MovedSettings):
    """
    Finds a query's best documents by three searches fused into one ranking: `dense` (the query vector against each
    chunk's vector), `lexical` (BM25 on words) and `ngrams` (BM25 on character n-grams of words, for spelling and
    word-form variants), each `candidates` deep.

    On the local store, and on PostgreSQL (both lists' facades on one table), the candidates of all three lists are
    re-scored by their best sentence: the `dense` list becomes every candidate, scored by the query's cosine to the
    chunk's vector or to its best sentence, whichever is higher (short questions often match one sentence of a long
    passage far better than the passage's one vector). Then the lists are fused (`fusion`: method, weights,
    normalisation; per document with `group_by`) and only the chunks kept are read from the store. The whole search
    works on ids and scores, so a query costs a few store calls and the documents it returns. With other server stores
    (Qdrant, Elasticsearch) the three lists come from the servers as documents and are fused the same way.

    Each chunk returned carries `meta["<list>_score"]` for the lists that found it (`dense_score` is the chunk
    vector's cosine), `meta["<list>_rank"]`, `meta["sentence_score"]` (local store, PostgreSQL) and the fused `score`
    of its document; documents best first, each one's best chunks first.

    Usage:
    ```python
    from gatehouse.components.retrievers.hybrid_retriever import HybridRetriever
    from gatehouse.document_stores.dense_document_store import DenseDocumentStore
    from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

    retriever = HybridRetriever(dense_store=DenseDocumentStore(), lexical_store=LexicalDocumentStore(),
                                ngrams_store=LexicalDocumentStore(analysis="ngrams"))
    docs = retriever.run(query="rotate api key", query_embedding=vector, filters=filters)["documents"]
    ```
    """

    moved_settings = {name: f"fusion.{name}" for name in FUSION}

    def __init__(
        self,
        *,
        dense_store: DenseDocumentStore,
        lexical_store: LexicalDocumentStore,
        ngrams_store: LexicalDocumentStore | None = None,
        candidates: int = 200,
        sentences: bool = True,
        fusion: dict[str, Any] | None = None,
        group_by: str | None = "doc_id",
        chunks_per_group: int | None = 3,
        top_k: int = 20,
    ) -> None:
        """
        :param dense_store: The dense store.
        :param lexical_store: The BM25 store on words.
        :param ngrams_store: The BM25 store on character n-grams (`analysis: ngrams`); None leaves that list out.
        :param candidates: Hits taken from each list before fusion.
        :param sentences: Re-score the candidates by their best sentence (local store, PostgreSQL).
        :param fusion: How the lists are fused: `method`, `weights`, `normalization`, `rrf_k` (see `FUSION`).
        :param group_by: Metadata key naming a chunk's document, to rank documents; None ranks chunks.
        :param chunks_per_group: With `group_by`, the most chunks kept per document (best first); None keeps all.
        :param top_k: Documents kept (chunks when `group_by` is None).
        :raises ValueError: If `fusion` names an unknown key, method, normalisation or list.
        """
        self.dense_store = dense_store
        self.lexical_store = lexical_store
        self.ngrams_store = ngrams_store
        self.candidates = candidates
        self.sentences = sentences
        self.fusion = _fusion_settings(fusion, ngrams_store)
        self.group_by = group_by
        self.chunks_per_group = chunks_per_group
        self.top_k = top_k
        self._fusion = Fusion(**self.fusion, group=group_by is not None, chunks_per_group=chunks_per_group,
                              depth=candidates)

    def _stores(self) -> dict[str, Any]:
        stores = {"dense": self.dense_store, "lexical": self.lexical_store, "ngrams": self.ngrams_store}
        return {name: stores[name] for name in self.fusion["weights"]}

    def _local(self) -> EdgeDocumentStore | None:
        """
        The one store all the searched stores share, if they do and it searches on ids (`ranked_ids`,
        `similarities`, `documents_by_point`): the local shard, or one PostgreSQL table.
        """
        backends = [store.store for store in self._stores().values()]
        first = backends[0]
        if (all(hasattr(first, method) for method in ("ranked_ids", "similarities", "documents_by_point"))
                and all(first.shares_shard(other) for other in backends[1:])):
            return first
        return None

    @component.output_types(documents=list[Document])
    def run(
        self, query: str, query_embedding: list[float] | Vector, filters: dict[str, Any], top_k: int | None = None
    ) -> dict[str, Any]:
        """
        Search.

        :param query: The query text (BM25 lists).
        :param query_embedding: The query vector (dense list, sentences).
        :param filters: Haystack filters (mandatory: the tenant filter always precedes retrieval).
        :param top_k: Overrides the init `top_k`.
        :returns: `documents`: the kept chunks, best document first.
        """
        limit = self.top_k if top_k is None else top_k
        vector = list(query_embedding)
        local = self._local()
        if local is not None:
            return {"documents": self._search_local(local, query, vector, filters, limit)}
        return {"documents": self._search_stores(query, vector, filters, limit)}

    def _search_local(
        self, store: EdgeDocumentStore, query: str, query_embedding: list[float], filters: dict[str, Any], limit: int
    ) -> list[Document]:
        searches = {name: "dense" if name == "dense" else store_.analysis for name, store_ in self._stores().items()}
        similar = None
        if self.sentences and "dense" in searches and hasattr(store, "ranked_ids_and_similarities"):
            lists, similar = store.ranked_ids_and_similarities(searches, query_embedding, query, filters,
                                                               self.candidates, group_by=self.group_by)
        else:
            lists = store.ranked_ids(searches, query_embedding, query, filters, self.candidates,
                                     group_by=self.group_by)
        scores = {name: {chunk: score for chunk, _, score in hits} for name, hits in lists.items()}
        sentence_scores = self._by_best_sentence(store, lists, query_embedding, similar)
        kept = self._fusion.rank(lists, limit)
        ranks = {name: {hit[0]: rank for rank, hit in enumerate(hits, start=1)} for name, hits in lists.items()}
        extras = []
        for chunk, fused in kept:
            meta: dict[str, Any] = {}
            for name in lists:
                if chunk in scores[name]:
                    meta[f"{name}_score"] = scores[name][chunk]
                if chunk in ranks[name]:
                    meta[f"{name}_rank"] = ranks[name][chunk]
            if sentence_scores.get(chunk) is not None:
                meta["sentence_score"] = sentence_scores[chunk]
            extras.append((chunk, fused, meta))
        return store.documents_by_point(extras)

    def _by_best_sentence(self, store: Any, lists: dict[str, list[tuple[Any, Any, float]]],
                          query_embedding: list[float],
                          similar: dict[Any, tuple[float, float | None]] | None = None) -> dict[Any, float | None]:
        """
        Make the `dense` list every candidate of every list, scored by the query's cosine to the chunk's vector or to
        its best sentence, whichever is higher (when `sentences` is on and the dense list is searched).

        :param store: The store with `similarities` (the local shard or PostgreSQL).
        :param similar: The candidates' similarities when the search gave them (`ranked_ids_and_similarities`).
        :returns: Each candidate's best-sentence cosine (None without sentence vectors).
        """
        if not self.sentences or "dense" not in lists:
            return {}
        union = {chunk: group for hits in lists.values() for chunk, group, _ in hits}
        if similar is None:
            similar = store.similarities(query_embedding, list(union))
        rescored = [(chunk, union[chunk], max(cosine, best if best is not None else cosine))
                    for chunk, (cosine, best) in similar.items()]
        order = {chunk: position for position, chunk in enumerate(union)}
        lists["dense"] = sorted(rescored, key=lambda hit: (-hit[2], order[hit[0]]))
        return {chunk: best for chunk, (_, best) in similar.items()}

    def _search_stores(
        self, query: str, query_embedding: list[float], filters: dict[str, Any], limit: int
    ) -> list[Document]:
        found: dict[str, Document] = {}  # each chunk's first hit, and what every list said of it
        said: dict[str, dict[str, Any]] = {}
        lists = {}
        for name, store in self._stores().items():
            if name == "dense":
                hits = store.embedding_retrieval(query_embedding, filters=filters, top_k=self.candidates)
            else:
                hits = store.bm25_retrieval(query, filters=filters, top_k=self.candidates)
            for rank, document in enumerate(hits, start=1):
                found.setdefault(document.id, document)
                said.setdefault(document.id, {}).update({f"{name}_score": document.score, f"{name}_rank": rank})
            lists[name] = [(document.id, document.meta.get(self.group_by) if self.group_by else None, document.score)
                           for document in hits]
        return [replace(found[chunk], score=fused, meta={**found[chunk].meta, **said[chunk]})
                for chunk, fused in self._fusion.rank(lists, limit)]
