"""Loading Gatehouse's YAML pipelines safely: an allowlist for our own modules, never unsafe deserialisation."""

import logging
import re
from copy import deepcopy
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError, PipelineError
from haystack.marshal import YamlMarshaller

from gatehouse.components.setting_groups import MovedSettingError
from gatehouse.settings import pipelines_dir

logger = logging.getLogger(__name__)

ALLOWED_MODULES = ["gatehouse.components.*", "gatehouse.document_stores.*"]
#: Components of this package run a pipeline YAML of their own (`pipeline_file`, or its content as `spec`).
SUB_PIPELINE_MODULE = "gatehouse.components.pipelines."

# Where the modules of the flat `components` package went when it became `gatehouse.components.<family>`.
RENAMED_MODULES = {
    "components.answerability_gate": "gatehouse.components.answerability.answerability_gate",
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
    "components.intent_gate": "gatehouse.components.intent.intent_gate",
    "components.kb_router": "gatehouse.components.kb_routing.kb_router",
    "components.llm_answerer": "gatehouse.components.generators.llm_answerer",
    "components.openai_compatible_generator": "gatehouse.components.generators.openai_compatible_generator",
    "components.passage_assembler": "gatehouse.components.builders.passage_assembler",
    "components.quality_gate": "gatehouse.components.quality.quality_gate",
    "components.query_rewriter": "gatehouse.components.query.query_rewriter",
    "components.ranker": "gatehouse.components.rankers.ranker",
    "components.request_intake": "gatehouse.components.intake.request_intake",
    "components.response_builder": "gatehouse.components.builders.response_builder",
    "components.section_splitter": "gatehouse.components.preprocessors.section_splitter",
    "components.sentence_embedder": "gatehouse.components.embedders.sentence_embedder",
    "components.sentence_scorer": "gatehouse.components.rankers.sentence_scorer",
    "components.stores.dense_document_store": "gatehouse.document_stores.dense_document_store",
    "components.stores.lexical_document_store": "gatehouse.document_stores.lexical_document_store",
    "components.tenant_filter": "gatehouse.components.retrievers.tenant_filter",
    "components.text_embedder": "gatehouse.components.embedders.text_embedder",
}

#: Classes an earlier pipeline YAML used and what does their job now.
RETIRED_CLASSES = {
    "gatehouse.components.routers.context_selector.ContextSelector":
        "no component: RequestIntake takes the caller's context (min_context_chars, invalid_context)",
    "gatehouse.components.retrievers.subquery_retrieval.SubQueryRetrieval":
        "gatehouse.components.pipelines.search_pipeline.SearchPipeline, which searches a plan's parts",
    "gatehouse.components.routers.plan_step.PlanStep":
        "gatehouse.components.pipelines.answer_pipeline.AnswerPipeline, which answers a plan's parts",
    "gatehouse.components.joiners.hybrid_fusion.HybridFusion":
        "no component: HybridRetriever (retrieve.yml's `search`) fuses the dense and BM25 lists itself (`fusion`)",
    "gatehouse.components.rankers.sentence_scorer.SentenceScorer":
        "no component: HybridRetriever (retrieve.yml's `search`) scores each chunk by its best sentence (`sentences`)",
    "gatehouse.components.guardrails.guardrails.Guardrails":
        "gatehouse.components.guardrails.input_guardrails.InputGuardrails for `stage: input` (the default) or "
        "gatehouse.components.guardrails.output_guardrails.OutputGuardrails for `stage: output`, without `stage` "
        "(docs/pipelines.md lists the settings of each)",
    "gatehouse.components.routers.semantic_cache.SemanticCacheStore":
        "gatehouse.components.cache.semantic_cache_store.SemanticCacheStore",
}

#: Classes that moved to another module: a YAML naming the old path loads the class where it is now, with a one-line
#: warning.
MOVED_CLASSES = {
    "gatehouse.components.routers.answerability_gate.AnswerabilityGate":
        "gatehouse.components.answerability.answerability_gate.AnswerabilityGate",
    # `components/routers/` held every gate; each family has its folder now.
    "gatehouse.components.routers.request_intake.RequestIntake":
        "gatehouse.components.intake.request_intake.RequestIntake",
    "gatehouse.components.routers.intent_gate.IntentGate": "gatehouse.components.intent.intent_gate.IntentGate",
    "gatehouse.components.routers.kb_router.KBRouter": "gatehouse.components.kb_routing.kb_router.KBRouter",
    "gatehouse.components.routers.kb_evidence.KBEvidence": "gatehouse.components.kb_routing.kb_evidence.KBEvidence",
    "gatehouse.components.routers.semantic_cache.SemanticCache":
        "gatehouse.components.cache.semantic_cache.SemanticCache",
    "gatehouse.components.routers.semantic_cache_store.SemanticCacheStore":
        "gatehouse.components.cache.semantic_cache_store.SemanticCacheStore",
    "gatehouse.components.routers.quality_gate.QualityGate": "gatehouse.components.quality.quality_gate.QualityGate",
}

_REWRITER = "gatehouse.components.query.query_rewriter.QueryRewriter"
_CONDENSER = "gatehouse.components.query.query_condenser.QueryCondenser"


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
    Load a pipeline by name (`ask`, `index`, `retrieve`, `search`, `answer`) or by path, with Gatehouse's modules
    allowlisted.

    :param name_or_path: A pipeline name in the pipelines folder, or a YAML file path.
    :param generator: A generator profile (`llm` is `generators/llm.yml` of the pipelines folder: one component's
        `type` and `init_parameters`) that replaces the pipeline's `generator` component (in a sub-pipeline too: the
        ask pipeline's is in `answer.yml`), gives the components it names in `llm_tiers` its chat generator, and sets
        the settings it gives other components in `settings`; None keeps the YAML's own.
    :returns: The loaded pipeline.
    :raises FileNotFoundError: If no such YAML file (pipeline or profile) exists.
    :raises PipelineYAMLError: If the YAML names components Gatehouse no longer has, sets what a component no longer
        takes (`task` of the query rewriter, settings grouped into one mapping), or a profile is given for a pipeline
        without a `generator` component.
    """
    return build_pipeline(read_spec(name_or_path), origin=str(pipeline_path(name_or_path)), generator=generator)


def read_spec(name_or_path: str | Path) -> dict[str, Any]:
    """
    The YAML of a pipeline (by name or path) as a spec to read or change before `build_pipeline`.

    :raises FileNotFoundError: If no such YAML file exists.
    """
    path = pipeline_path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"No pipeline YAML at {path}.")
    return YamlMarshaller().unmarshal(path.read_text(encoding="utf-8"))


def build_pipeline(spec: dict[str, Any], *, origin: str = "the pipeline", generator: str | None = None) -> Pipeline:
    """
    Build a pipeline from its spec (a YAML's content), with Gatehouse's modules allowlisted.

    :param spec: The spec; it is not changed.
    :param origin: Where the spec came from, for messages.
    :param generator: A generator profile that replaces the `generator` component (see `load_pipeline`).
    :returns: The pipeline.
    :raises PipelineYAMLError: If the spec (or a sub-pipeline's) names components Gatehouse no longer has, or a
        setting where it stood before it moved into a group, or cannot be built as written (a component of a module
        outside the allowlist, a type that does not exist, settings a component refuses, a bad connection): one line
        naming the component.
    """
    spec = deepcopy(spec)
    if generator is not None:
        _use_generator_profile(origin, spec, generator)
    for old in sorted(set(_moved_types(spec))):
        logger.warning("%s: `type: %s` is deprecated; it loads %s, write that instead.", origin, old,
                       MOVED_CLASSES[old])
    outdated = sorted(set(_outdated_types(spec)))
    settings = list(dict.fromkeys(_outdated_settings(spec.get("components") or {})))
    if outdated or settings:
        fixes = [f"change the `type:` strings: {'; '.join(f'{old} -> {new}' for old, new in outdated)}"] if outdated \
            else []
        fixes += [f"change what its components no longer take: {'; '.join(settings)}"] if settings else []
        raise PipelineYAMLError(
            f"{origin} was written for an earlier Gatehouse: run `gatehouse init` into a new folder for the current "
            f"pipelines and carry your settings across, or, to load this one, {', and '.join(fixes)}."
        )
    try:
        return Pipeline.from_dict(spec, allowed_modules=ALLOWED_MODULES)
    except DeserializationError as error:
        if isinstance(error.__cause__, PipelineYAMLError):  # a sub-pipeline's YAML, named in its message
            raise PipelineYAMLError(str(error.__cause__)) from error
        if isinstance(error.__cause__, MovedSettingError):
            raise PipelineYAMLError(f"{origin}: {error.__cause__}") from error
        raise PipelineYAMLError(_unloadable(origin, spec, error)) from error
    except PipelineError as error:
        raise PipelineYAMLError(_unloadable(origin, spec, error)) from error


#: What Haystack says of a component type outside the allowlist, of one it cannot import, of one that failed to start.
_NOT_ALLOWED = re.compile(r"from module '([^']+)': the module is not on the trusted-module allowlist")
_NOT_IMPORTED = re.compile(r"Component '([^']+)' \(name: '([^']+)'\) not imported")
_NOT_BUILT = re.compile(r"Couldn't deserialize component '([^']+)' of class '([^']+)'")
_UNKNOWN_SETTING = re.compile(r"unexpected keyword argument '([^']+)'")


def _unloadable(origin: str, spec: dict[str, Any], error: Exception) -> str:
    """
    One line saying why Haystack could not build the pipeline of `spec`: a component whose type is outside the modules
    pipelines may load, a type that does not exist, a component that refused its settings, or Haystack's own first
    message (a connection with its sockets' types, a missing `type`) on one line.
    """
    text = str(error)
    if match := _NOT_ALLOWED.search(text):
        module = match.group(1)
        named = [f"{name!r} ({component.get('type')})" for name, component in (spec.get("components") or {}).items()
                 if isinstance(component, dict) and str(component.get("type", "")).startswith(module + ".")]
        return (f"{origin}: component {', '.join(named) or 'of module ' + repr(module)} is of a module pipelines may "
                f"not load: Gatehouse loads {' and '.join(ALLOWED_MODULES)}, and `gatehouse serve` also the "
                "allowed_modules of hayhooks.yml")
    if match := _NOT_IMPORTED.search(text):
        return (f"{origin}: component {match.group(2)!r} has type {match.group(1)!r}, which does not exist: check its "
                "spelling (docs/pipelines.md lists the components) or install the package that provides it")
    if (match := _NOT_BUILT.search(text)) and error.__cause__ is not None:
        cause = str(error.__cause__).splitlines()[0] if str(error.__cause__) else type(error.__cause__).__name__
        if unknown := _UNKNOWN_SETTING.search(cause):
            cause = f"it has no setting {unknown.group(1)!r} (docs/pipelines.md lists its settings)"
        return f"{origin}: component {match.group(1)!r} ({match.group(2)}) cannot be built as written: {cause}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]  # Haystack's detail (the sockets' types)
    return f"{origin}: {' '.join(lines) if lines else type(error).__name__}"


def component_spec(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """
    The spec (`type`, `init_parameters`) of a component of a pipeline spec, to read or change in place: a component of
    the pipeline itself, one of a sub-pipeline by its path (`answer.verifier`), or the only one of that name in any
    sub-pipeline (`verifier`). A sub-pipeline's YAML is read into the spec (its `spec` parameter) the first time, so
    a change stays in this spec: the files are never written.

    :param spec: A pipeline spec (`read_spec`).
    :param name: The component's name or path.
    :returns: The component's spec.
    :raises KeyError: If there is no such component.
    """
    components = spec["components"]
    head, _, rest = name.partition(".")
    if rest:
        return component_spec(sub_pipeline_spec(spec, head), rest)
    if name in components:
        return components[name]
    for component in components.values():
        if _is_sub_pipeline(component):
            try:
                return component_spec(_inlined(component), name)
            except KeyError:
                continue
    raise KeyError(f"No component '{name}' in the pipeline or its sub-pipelines.")


def _is_sub_pipeline(component: dict[str, Any]) -> bool:
    return str(component.get("type", "")).startswith(SUB_PIPELINE_MODULE)


def sub_pipeline_spec(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """
    The spec of the pipeline a sub-pipeline component runs (`answer`: answer.yml's), read from its file into the
    component's `spec` parameter the first time, to read or change in place (see `component_spec`).

    :raises KeyError: If the pipeline has no sub-pipeline component of that name.
    """
    component = spec["components"].get(name)
    if component is None or not _is_sub_pipeline(component):
        raise KeyError(f"No sub-pipeline '{name}' in the pipeline.")
    return _inlined(component)


def _inlined(component: dict[str, Any]) -> dict[str, Any]:
    """A sub-pipeline component's spec of its pipeline, read from its file into `spec` the first time."""
    parameters = component.setdefault("init_parameters", {})
    if parameters.get("spec") is None:
        parameters["spec"] = read_spec(parameters["pipeline_file"])
    return parameters["spec"]


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


def _use_generator_profile(origin: str, spec: dict[str, Any], generator: str) -> None:
    """
    Replace the pipeline spec's `generator` component (in a sub-pipeline too) by the profile's component spec, give
    each component the profile's `llm_tiers` names (the condenser, the planner) the profile's `chat_generator` as its
    LLM tier (their rules stay the fallback when it fails), and set the profile's `settings` of other components
    (by name or path, as `component_spec` finds them) over their own: a mapping setting is merged key by key.
    """
    profile_path = generator_profile_path(generator)
    if not profile_path.is_file():
        available = sorted(p.stem for p in profile_path.parent.glob("*.yml"))
        raise FileNotFoundError(
            f"No generator profile '{generator}' at {profile_path} (available: {', '.join(available) or 'none'})."
        )
    try:
        target = component_spec(spec, "generator")
    except KeyError:
        raise PipelineYAMLError(f"{origin} has no `generator` component for the profile '{generator}' to replace.") \
            from None
    profile = yaml.safe_load(profile_path.read_text(encoding="utf-8"))
    if not isinstance(profile, dict) or not isinstance(profile.get("type"), str):
        raise PipelineYAMLError(f"{profile_path} must hold one component: its `type` and `init_parameters`.")
    tiers = profile.pop("llm_tiers", None) or []
    overrides = profile.pop("settings", None) or {}
    chat_generator = (profile.get("init_parameters") or {}).get("chat_generator")
    if tiers and not isinstance(chat_generator, dict):
        raise PipelineYAMLError(f"{profile_path}: `llm_tiers` needs the profile's own `chat_generator` to give them.")
    if not isinstance(overrides, dict) or not all(isinstance(v, dict) for v in overrides.values()):
        raise PipelineYAMLError(f"{profile_path}: `settings` must map a component's name to the settings it changes "
                                "(`answerability: {threshold: 0.2}`).")
    target.clear()
    target.update(profile)
    for name in tiers:
        tier = _profile_component(spec, str(name), origin, profile_path, "llm_tiers")
        tier["init_parameters"] = {**(tier.get("init_parameters") or {}), "chat_generator": deepcopy(chat_generator)}
    for name, settings in overrides.items():
        component = _profile_component(spec, str(name), origin, profile_path, "settings")
        component["init_parameters"] = _merged(component.get("init_parameters") or {}, settings)


def _profile_component(spec: dict[str, Any], name: str, origin: str, profile_path: Path, key: str) -> dict[str, Any]:
    """The component a profile's `llm_tiers` or `settings` names (a clear error when the pipeline has none)."""
    try:
        return component_spec(spec, name)
    except KeyError:
        raise PipelineYAMLError(f"{profile_path}: `{key}` names {name!r}, which {origin} does not have.") from None


def _merged(settings: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`settings` with `changes` over them; a mapping changed by a mapping is merged key by key."""
    merged = deepcopy(settings)
    for key, value in changes.items():
        current = merged.get(key)
        merged[key] = _merged(current, value) if isinstance(current, dict) and isinstance(value, dict) \
            else deepcopy(value)
    return merged


def _moved_types(node: Any):
    """Write every `type:` of the YAML tree that names a moved class (`MOVED_CLASSES`) as it is now; yield the old."""
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, str) and kind in MOVED_CLASSES:
            node["type"] = MOVED_CLASSES[kind]
            yield kind
        for value in node.values():
            yield from _moved_types(value)
    elif isinstance(node, list):
        for value in node:
            yield from _moved_types(value)


def _outdated_types(node: Any):
    """(old, what to write instead) for every `type:` in the YAML tree that names a class Gatehouse no longer has."""
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, str):
            current = _current_type(kind)
            if current in RETIRED_CLASSES:
                yield kind, RETIRED_CLASSES[current]
            elif current != kind:
                yield kind, current
        for value in node.values():
            yield from _outdated_types(value)
    elif isinstance(node, list):
        for value in node:
            yield from _outdated_types(value)


def _current_type(kind: str) -> str:
    """A class path as it is written now: the flat `components.*` modules moved to `gatehouse.components.<family>`."""
    if not kind.startswith("components."):
        return kind
    module, _, name = kind.rpartition(".")
    if module in RENAMED_MODULES:
        return f"{RENAMED_MODULES[module]}.{name}"
    if module == "components.retrieval_stage":
        return "gatehouse.components.retrievers.retrieval_pipeline.RetrievalPipeline, inside pipelines/search.yml"
    return "a gatehouse.components.<family> module"


def _outdated_settings(node: Any, where: str = ""):
    """What to change in every component of the YAML tree (`where`: its place) that sets the query rewriter's `task`."""
    if isinstance(node, dict):
        kind, params = node.get("type"), node.get("init_parameters")
        if isinstance(kind, str) and isinstance(params, dict):
            condenses = kind == _REWRITER and params.get("task") == "condense"
            if condenses:
                yield (f"`{where}` is a QueryRewriter with `task: condense`, and follow-ups are condensed by their own "
                       f"component now: write `type: {_CONDENSER}` and remove `task`")
            elif kind == _REWRITER and "task" in params:
                yield (f"`{where}` sets `task: {params['task']}`, but QueryRewriter only rewrites a weak query for a "
                       f"retry now (follow-ups: {_CONDENSER}): remove `task`")
            elif kind == _CONDENSER and "task" in params:
                yield f"`{where}` sets `task: {params['task']}`, but QueryCondenser takes no `task`: remove it"
        for key, value in node.items():
            yield from _outdated_settings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _outdated_settings(value, f"{where}[{index}]")
