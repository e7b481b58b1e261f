"""
The knowledge bases held by the stores `index.yml` writes to: what each tenant holds (documents and chunks per
knowledge base), and deleting a knowledge base or single documents from both stores.

A document is what ingestion wrote under one `doc_id` (`<tenant>/<kb>/<source>`: one file). Counts come from the
lexical store's `metadata_counts` (counted once per write); deletions go through both stores' `delete_by_filter` (the
second finds nothing when both are the local shard), which move the KBs' write counters, so caches of derived data
(answers, KB profiles) are rebuilt. `gatehouse kb list` reads a local shard directly (`list_local_knowledge_bases`).

Usage:
```python
from gatehouse.knowledge_bases import KnowledgeBaseCatalogue
from gatehouse.pipelines import load_pipeline

catalogue = KnowledgeBaseCatalogue.from_index_pipeline(load_pipeline("index"))
catalogue.knowledge_bases(tenants=["public"])   # [KnowledgeBase(tenant="public", kb="faq", documents=20, ...), ...]
catalogue.delete(kb="faq", tenant="public")     # the deleted KnowledgeBase (KnowledgeBaseNotFoundError if none)
```
"""

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gatehouse import settings
from gatehouse.document_stores.migration import legacy_collections

if TYPE_CHECKING:
    from haystack import Pipeline

    from gatehouse.document_stores.dense_document_store import DenseDocumentStore
    from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

DOCUMENT_FIELDS = ["tenant", "kb", "doc_id", "source"]


@dataclass(frozen=True)
class KnowledgeBase:
    """A knowledge base of one tenant, with how many documents (ingested files) and chunks it holds."""

    tenant: str
    kb: str
    documents: int
    chunks: int


@dataclass(frozen=True, order=True)
class StoredDocument:
    """An ingested document: its knowledge base, its id, its source name and how many chunks it has."""

    tenant: str
    kb: str
    doc_id: str
    source: str
    chunks: int


class KnowledgeBaseNotFoundError(LookupError):
    """The tenant holds no document in the named knowledge base."""


def _equals(field: str, value: str) -> dict[str, Any]:
    return {"field": f"meta.{field}", "operator": "==", "value": value}


class KnowledgeBaseCatalogue:
    """
    The knowledge bases of a dense and a lexical store (the pair `IndexWriter` writes to).

    The lexical store is the catalogue: counts are read from it, and deletions remove chunks from the dense store
    first, so a deletion that fails half-way still lists what remains and can simply be repeated.
    """

    def __init__(self, *, dense_store: "DenseDocumentStore", lexical_store: "LexicalDocumentStore") -> None:
        """
        :param dense_store: The vector store.
        :param lexical_store: The BM25 index, whose `metadata_counts` lists the documents.
        """
        self.dense_store = dense_store
        self.lexical_store = lexical_store

    @classmethod
    def from_index_pipeline(cls, pipeline: "Pipeline") -> "KnowledgeBaseCatalogue":
        """
        The catalogue of the stores an index pipeline writes to.

        :param pipeline: A loaded `index.yml`, whose `writer` is an `IndexWriter`.
        :returns: The catalogue over the writer's stores.
        """
        writer = pipeline.get_component("writer")
        return cls(dense_store=writer.dense_store, lexical_store=writer.lexical_store)

    def documents(self, *, tenants: Collection[str] | None = None, kb: str | None = None) -> list[StoredDocument]:
        """
        The ingested documents, sorted by tenant, knowledge base and id.

        :param tenants: Only these tenants' documents; None for every tenant.
        :param kb: Only this knowledge base's documents; None for every knowledge base.
        :returns: One entry per document id, with its chunk count (chunks lacking ingest metadata are left out).
        """
        counts = self.lexical_store.metadata_counts(DOCUMENT_FIELDS)
        documents = [
            StoredDocument(tenant=tenant, kb=name, doc_id=doc_id, source=source, chunks=chunks)
            for (tenant, name, doc_id, source), chunks in counts.items()
            if None not in (tenant, name, doc_id, source)
        ]
        return sorted(d for d in documents if (tenants is None or d.tenant in tenants) and (kb is None or d.kb == kb))

    def knowledge_bases(self, *, tenants: Collection[str] | None = None) -> list[KnowledgeBase]:
        """
        The knowledge bases with their document and chunk counts, sorted by tenant and name.

        :param tenants: Only these tenants' knowledge bases; None for every tenant.
        :returns: The knowledge bases that hold at least one document.
        """
        held: dict[tuple[str, str], list[StoredDocument]] = defaultdict(list)
        for document in self.documents(tenants=tenants):
            held[(document.tenant, document.kb)].append(document)
        return [
            KnowledgeBase(tenant=tenant, kb=kb, documents=len(documents), chunks=sum(d.chunks for d in documents))
            for (tenant, kb), documents in sorted(held.items())
        ]

    def delete(self, *, kb: str, tenant: str) -> KnowledgeBase:
        """
        Delete every chunk of one tenant's knowledge base from both stores; other tenants' KBs of that name stay.

        :param kb: The knowledge base.
        :param tenant: The tenant that owns it.
        :returns: The knowledge base as it was before the deletion.
        :raises KnowledgeBaseNotFoundError: If the tenant holds no document in `kb` (naming the KBs it holds).
        """
        held = self.knowledge_bases(tenants=[tenant])
        found = [knowledge_base for knowledge_base in held if knowledge_base.kb == kb]
        if not found:
            names = ", ".join(knowledge_base.kb for knowledge_base in held) or "none"
            raise KnowledgeBaseNotFoundError(
                f"no knowledge base '{kb}' for tenant '{tenant}' (its knowledge bases: {names})"
            )
        self._delete({"operator": "AND", "conditions": [_equals("tenant", tenant), _equals("kb", kb)]})
        return found[0]

    def delete_documents(self, documents: list[StoredDocument]) -> None:
        """
        Delete every chunk of these documents from both stores.

        :param documents: Documents as `documents()` lists them.
        """
        if documents:
            self._delete({"field": "meta.doc_id", "operator": "in", "value": [d.doc_id for d in documents]})

    def _delete(self, filters: dict[str, Any]) -> None:
        self.dense_store.delete_by_filter(filters)
        self.lexical_store.delete_by_filter(filters)


def local_store_folder(index_yaml: Path | None = None) -> Path | None:
    """
    The folder of the local shard `index.yml`'s writer writes to, read from the YAML (no Haystack, no model), or
    None when it writes to a Qdrant server, Elasticsearch or PostgreSQL.

    :param index_yaml: The index pipeline file; defaults to `index.yml` of the pipelines folder.
    """
    if settings.qdrant_url() or settings.elasticsearch_url() or settings.postgres_url():
        return None
    spec = yaml.safe_load((index_yaml or settings.pipelines_dir() / "index.yml").read_text(encoding="utf-8"))
    writer = (spec.get("components") or {}).get("writer", {}).get("init_parameters", {})
    dense = (writer.get("dense_store") or {}).get("init_parameters") or {}
    lexical = (writer.get("lexical_store") or {}).get("init_parameters") or {}
    servers = (dense.get("url"), (dense.get("postgres") or {}).get("url"), lexical.get("elasticsearch_url"),
               (lexical.get("postgres") or {}).get("url"), lexical.get("backend") in ("elasticsearch", "postgres"))
    if any(servers):
        return None
    path = (lexical.get("local") or {}).get("path")
    if path != dense.get("path"):
        return None  # two folders: only the pipeline knows how they relate
    if path is None and legacy_collections(settings.data_dir()) and not (settings.data_dir() / "store").is_dir():
        return None  # written by an older Gatehouse: opening the pipeline's stores moves it first
    return Path(path).expanduser() if path else settings.data_dir() / "store"


def list_local_knowledge_bases(folder: Path, *, tenants: Collection[str] | None = None) -> list[KnowledgeBase]:
    """
    The knowledge bases of a local shard folder, read without loading a pipeline (`gatehouse kb list`).

    :param folder: The shard folder (`local_store_folder()`); none there yet means no knowledge base.
    :param tenants: Only these tenants' knowledge bases; None for every tenant.
    """
    from gatehouse.document_stores.edge_shard import Shard, shard_settings

    if not (folder / "edge_config.json").is_file():
        return []
    return KnowledgeBaseCatalogue(dense_store=None, lexical_store=Shard.at(folder, shard_settings())).knowledge_bases(
        tenants=tenants
    )
