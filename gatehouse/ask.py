"""Asking questions through `pipelines/ask.yml`."""

from typing import Any

from haystack import Pipeline
from haystack.dataclasses import StreamingCallbackT

from gatehouse.pipelines import load_pipeline, pipeline_path
from gatehouse.settings import data_dir

_pipelines: dict[tuple[str, str | None, str], Pipeline] = {}


def ask_pipeline(name: str = "ask", generator: str | None = None) -> Pipeline:
    """
    The loaded and warmed-up ask pipeline (loaded once per process, pipeline file, generator profile and data
    directory).

    :param name: Pipeline name or YAML path.
    :param generator: A generator profile of `pipelines/generators/` (e.g. `llm`); None keeps the YAML's generator.
    """
    key = (str(pipeline_path(name)), generator, str(data_dir()))  # another data folder is another pipeline's stores
    if key not in _pipelines:
        pipeline = load_pipeline(name, generator=generator)
        pipeline.warm_up()
        _pipelines[key] = pipeline
    return _pipelines[key]


def ask(
    question: str,
    *,
    kb: str | None = None,
    tenant: str | None = None,
    mode: str | None = None,
    context: str | None = None,
    history: list[dict[str, Any]] | None = None,
    pipeline: str = "ask",
    generator: str | None = None,
) -> dict[str, Any]:
    """
    Ask a question and return the response contract.

    :param question: The question.
    :param kb: A knowledge base to search instead of routing.
    :param tenant: The caller's tenant.
    :param mode: `full-corpus`, `constrained-context` or `hybrid`.
    :param context: Text for the constrained and hybrid modes.
    :param history: Earlier turns, `{role, content}`.
    :param pipeline: Pipeline name or YAML path.
    :param generator: A generator profile of `pipelines/generators/` (e.g. `llm`); None keeps the YAML's generator.
    :returns: The response dict.
    """
    return run_ask(ask_pipeline(pipeline, generator), question, kb=kb, tenant=tenant, mode=mode, context=context,
                   history=history)


def run_ask(
    pipeline: Pipeline,
    question: str,
    *,
    kb: str | None = None,
    tenant: str | None = None,
    mode: str | None = None,
    context: str | None = None,
    history: list[dict[str, Any]] | None = None,
    deadline: float | None = None,
    streaming_callback: StreamingCallbackT | None = None,
) -> dict[str, Any]:
    """
    Run a loaded ask pipeline (`ask.yml`'s intake inputs) and return the response contract.

    :param deadline: `time.monotonic()` by which the request must be answered: a `run()` input of every component
        that calls a language model (their calls fit in what is left); None: only the models' own timeouts.
    :param streaming_callback: Streams the answer: a `run()` input of the components that take one (the LLM
        answerer, whose reply is verified and screened sentence by sentence; the output guardrails, which send each
        sentence to it); an answer made at once reaches it never (it is in the response).
    """
    data: dict[str, dict[str, Any]] = {
        "intake": {"query": question, "kb": kb, "tenant": tenant, "mode": mode, "context": context, "history": history}
    }
    per_request = {"deadline": deadline, "streaming_callback": streaming_callback}
    for name, sockets in pipeline.inputs().items():
        given = {key: value for key, value in per_request.items() if value is not None and key in sockets}
        if given:
            data.setdefault(name, {}).update(given)
    return pipeline.run(data)["response"]["response"]
