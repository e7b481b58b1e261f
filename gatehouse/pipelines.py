"""Loading Gatehouse's YAML pipelines safely: an allowlist for our own modules, never unsafe deserialisation."""

import os
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline

from gatehouse.settings import PROJECT_ROOT

ALLOWED_MODULES = ["gatehouse.components.*", "gatehouse.document_stores.*"]

# Where the modules of the flat `components` package went when it became `gatehouse.components.<family>`.
RENAMED_MODULES = {
    "components.answerability_gate": "gatehouse.components.routers.answerability_gate",
    "components.bm25_retriever": "gatehouse.components.retrievers.bm25_retriever",
    "components.citation_verifier": "gatehouse.components.validators.citation_verifier",
    "components.context_selector": "gatehouse.components.routers.context_selector",
    "components.dense_retriever": "gatehouse.components.retrievers.dense_retriever",
    "components.direct_answerer": "gatehouse.components.generators.direct_answerer",
    "components.document_embedder": "gatehouse.components.embedders.document_embedder",
    "components.extractive_answerer": "gatehouse.components.generators.extractive_answerer",
    "components.guardrails": "gatehouse.components.guardrails.guardrails",
    "components.hybrid_fusion": "gatehouse.components.joiners.hybrid_fusion",
    "components.index_writer": "gatehouse.components.writers.index_writer",
    "components.ingest_planner": "gatehouse.components.writers.ingest_planner",
    "components.intent_gate": "gatehouse.components.routers.intent_gate",
    "components.kb_router": "gatehouse.components.routers.kb_router",
    "components.llm_answerer": "gatehouse.components.generators.llm_answerer",
    "components.openai_compatible_generator": "gatehouse.components.generators.openai_compatible_generator",
    "components.passage_assembler": "gatehouse.components.builders.passage_assembler",
    "components.quality_gate": "gatehouse.components.routers.quality_gate",
    "components.query_rewriter": "gatehouse.components.query.query_rewriter",
    "components.ranker": "gatehouse.components.rankers.ranker",
    "components.request_intake": "gatehouse.components.routers.request_intake",
    "components.response_builder": "gatehouse.components.builders.response_builder",
    "components.retrieval_stage": "gatehouse.components.retrievers.retrieval_stage",
    "components.section_splitter": "gatehouse.components.preprocessors.section_splitter",
    "components.sentence_embedder": "gatehouse.components.embedders.sentence_embedder",
    "components.sentence_scorer": "gatehouse.components.rankers.sentence_scorer",
    "components.stores.bm25_document_store": "gatehouse.document_stores.bm25_document_store",
    "components.stores.dense_document_store": "gatehouse.document_stores.dense_document_store",
    "components.stores.lexical_document_store": "gatehouse.document_stores.lexical_document_store",
    "components.tenant_filter": "gatehouse.components.retrievers.tenant_filter",
    "components.text_embedder": "gatehouse.components.embedders.text_embedder",
    "components.stores.bm25_document_store": "gatehouse.document_stores.bm25_document_store",
    "components.stores.dense_document_store": "gatehouse.document_stores.dense_document_store",
    "components.stores.lexical_document_store": "gatehouse.document_stores.lexical_document_store",
}


class PipelineYAMLError(ValueError):
    """A pipeline YAML that cannot be loaded as written (the message says what to change)."""


def pipelines_dir() -> Path:
    """The folder of the YAML pipelines (`GATEHOUSE_PIPELINES_DIR`, default `<project>/pipelines`)."""
    return Path(os.environ.get("GATEHOUSE_PIPELINES_DIR") or PROJECT_ROOT / "pipelines").resolve()


def pipeline_path(name_or_path: str | Path) -> Path:
    """
    The YAML file of a pipeline: a name (`ask`) is a file of the pipelines folder; a relative path that does not
    exist from here is taken relative to that folder.
    """
    path = Path(name_or_path)
    if path.suffix not in {".yml", ".yaml"}:
        return pipelines_dir() / f"{name_or_path}.yml"
    if not path.is_absolute() and not path.exists():
        return pipelines_dir() / path
    return path


def load_pipeline(name_or_path: str | Path) -> Pipeline:
    """
    Load a pipeline by name (`ask`, `index`, `retrieve`) or by path, with Gatehouse's modules allowlisted.

    :param name_or_path: A pipeline name in the pipelines folder, or a YAML file path.
    :returns: The loaded pipeline.
    :raises FileNotFoundError: If no such YAML file exists.
    :raises PipelineYAMLError: If the YAML names components by their old `components.*` module paths.
    """
    path = pipeline_path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"No pipeline YAML at {path}.")
    text = path.read_text(encoding="utf-8")
    outdated = sorted(set(_outdated_types(yaml.safe_load(text))))
    if outdated:
        fixes = "; ".join(f"{old} -> {new}" for old, new in outdated)
        raise PipelineYAMLError(
            f"{path} names components by their old module paths; Gatehouse's components live in "
            f"gatehouse.components.<family> now. Change the `type:` strings: {fixes}."
        )
    return Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)


def _outdated_types(node: Any):
    """(old, new) for every `type:` in the YAML tree that names a class by its pre-`gatehouse.components` module."""
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, str) and kind.startswith("components."):
            module, _, name = kind.rpartition(".")
            new = RENAMED_MODULES.get(module)
            yield kind, f"{new}.{name}" if new else "a gatehouse.components.<family> module"
        for value in node.values():
            yield from _outdated_types(value)
    elif isinstance(node, list):
        for value in node:
            yield from _outdated_types(value)
