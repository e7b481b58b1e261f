"""Loading Gatehouse's YAML pipelines safely: an allowlist for our own modules, never unsafe deserialisation."""

from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.marshal import YamlMarshaller

from gatehouse.settings import pipelines_dir

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
    "components.section_splitter": "gatehouse.components.preprocessors.section_splitter",
    "components.sentence_embedder": "gatehouse.components.embedders.sentence_embedder",
    "components.sentence_scorer": "gatehouse.components.rankers.sentence_scorer",
    "components.stores.dense_document_store": "gatehouse.document_stores.dense_document_store",
    "components.stores.lexical_document_store": "gatehouse.document_stores.lexical_document_store",
    "components.tenant_filter": "gatehouse.components.retrievers.tenant_filter",
    "components.text_embedder": "gatehouse.components.embedders.text_embedder",
}

# Components that moved to another module of `gatehouse.components`.
MOVED_CLASSES = {
    "gatehouse.components.routers.semantic_cache.SemanticCacheStore":
        "gatehouse.components.routers.semantic_cache_store.SemanticCacheStore",
}


class PipelineYAMLError(ValueError):
    """A pipeline YAML that cannot be loaded as written (the message says what to change)."""


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


def generator_profile_path(name: str) -> Path:
    """The YAML file of a generator profile: `<pipelines folder>/generators/<name>.yml`."""
    return pipelines_dir() / "generators" / f"{name}.yml"


def load_pipeline(name_or_path: str | Path, *, generator: str | None = None) -> Pipeline:
    """
    Load a pipeline by name (`ask`, `index`, `retrieve`) or by path, with Gatehouse's modules allowlisted.

    :param name_or_path: A pipeline name in the pipelines folder, or a YAML file path.
    :param generator: A generator profile (`llm` is `generators/llm.yml` of the pipelines folder: one component's
        `type` and `init_parameters`) that replaces the pipeline's `generator` component; None keeps the YAML's own.
    :returns: The loaded pipeline.
    :raises FileNotFoundError: If no such YAML file (pipeline or profile) exists.
    :raises PipelineYAMLError: If the YAML names components by their old module paths (`components.*`, or a
        module a component has moved from), or a profile is given for a pipeline without a `generator` component.
    """
    path = pipeline_path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"No pipeline YAML at {path}.")
    spec = YamlMarshaller().unmarshal(path.read_text(encoding="utf-8"))
    if generator is not None:
        _use_generator_profile(path, spec, generator)
    outdated = sorted(set(_outdated_types(spec)))
    if outdated:
        fixes = "; ".join(f"{old} -> {new}" for old, new in outdated)
        raise PipelineYAMLError(
            f"{path} names components by their old module paths (Gatehouse's components live in "
            f"gatehouse.components.<family>, one module each). Change the `type:` strings: {fixes}."
        )
    return Pipeline.from_dict(spec, allowed_modules=ALLOWED_MODULES)


def without_answer_cache(spec: dict[str, Any]) -> dict[str, Any]:
    """
    An ask pipeline spec whose answer cache is switched off (`enabled: false`), for measurements that repeat questions
    and must time or score every gate (the evaluation, the serving benchmark).

    :param spec: A loaded pipeline YAML; it is not changed.
    :returns: A new spec.
    """
    components = {
        name: {**component, "init_parameters": {**component.get("init_parameters", {}), "enabled": False}}
        if component["type"].endswith(".SemanticCache") else component
        for name, component in spec["components"].items()
    }
    return {**spec, "components": components}


def _use_generator_profile(path: Path, spec: dict[str, Any], generator: str) -> None:
    """Replace the pipeline spec's `generator` component by the profile's component spec."""
    profile_path = generator_profile_path(generator)
    if not profile_path.is_file():
        available = sorted(p.stem for p in profile_path.parent.glob("*.yml"))
        raise FileNotFoundError(
            f"No generator profile '{generator}' at {profile_path} (available: {', '.join(available) or 'none'})."
        )
    if "generator" not in (spec.get("components") or {}):
        raise PipelineYAMLError(f"{path} has no `generator` component for the profile '{generator}' to replace.")
    profile = yaml.safe_load(profile_path.read_text(encoding="utf-8"))
    if not isinstance(profile, dict) or not isinstance(profile.get("type"), str):
        raise PipelineYAMLError(f"{profile_path} must hold one component: its `type` and `init_parameters`.")
    spec["components"]["generator"] = profile


def _outdated_types(node: Any):
    """(old, new) for every `type:` in the YAML tree that names a class by a module it has moved from."""
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, str) and kind in MOVED_CLASSES:
            yield kind, MOVED_CLASSES[kind]
        elif isinstance(kind, str) and kind.startswith("components."):
            module, _, name = kind.rpartition(".")
            new = RENAMED_MODULES.get(module)
            if new:
                yield kind, f"{new}.{name}"
            elif module == "components.retrieval_stage":
                yield kind, "gatehouse.components.retrievers.retrieval_pipeline.RetrievalPipeline, between a " \
                    "RetrievalRequest and a RetrievalResult (as in the shipped ask.yml)"
            else:
                yield kind, "a gatehouse.components.<family> module"
        for value in node.values():
            yield from _outdated_types(value)
    elif isinstance(node, list):
        for value in node:
            yield from _outdated_types(value)
