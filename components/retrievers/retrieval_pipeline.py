"""Retrieval as one component: a Haystack SuperComponent over the retrieval pipeline YAML, kept by reference."""


from haystack import Pipeline, super_component

from gatehouse.pipelines import load_pipeline

QUERY_SOCKETS = ("query", "text")
FILTER_SOCKETS = ("tenant", "kbs")


def retrieval_input_mapping(pipeline: Pipeline) -> dict[str, list[str]]:
    """
    Map the retrieval pipeline's open inputs to four names: every socket called `query` or `text` (retrievers, query
    embedder, ranker) takes `query`, the tenant filter's `tenant` and `kbs` take theirs, and the last stage's
    `top_k` takes `top_k`. A retriever added in YAML is fed without a code change.
    """
    mapping: dict[str, list[str]] = {"query": []}
    last = next(iter(pipeline.outputs()))
    for name, sockets in pipeline.inputs().items():
        for socket in sockets:
            if socket in QUERY_SOCKETS:
                mapping["query"].append(f"{name}.{socket}")
            elif socket in FILTER_SOCKETS:
                mapping.setdefault(socket, []).append(f"{name}.{socket}")
            elif socket == "top_k" and name == last:
                mapping["top_k"] = [f"{name}.top_k"]
    if not mapping["query"]:
        raise ValueError("The retrieval pipeline has no open `query` or `text` input to send the query to.")
    return mapping


@super_component
class RetrievalPipeline:
    """
    The retrieval pipeline (`pipelines/retrieve.yml` by default) as one component with the inputs `query`,
    `tenant`, `kbs` and `top_k` and the output `documents`, so `ask.yml` (and the router's evidence search) run the
    retrieval declared once in its own file. It serialises by reference to that file, not as a copy of it.

    Usage:
    ```python
    from gatehouse.components.retrievers.retrieval_pipeline import RetrievalPipeline

    retrieval = RetrievalPipeline(pipeline_file="retrieve")
    retrieval.warm_up()
    documents = retrieval.run(query="How do I rotate an API key?", tenant="public", kbs=["faq"])["documents"]
    ```
    """

    def __init__(self, *, pipeline_file: str = "retrieve") -> None:
        """
        :param pipeline_file: Name (in the pipelines folder) or path of the retrieval pipeline YAML. Its last
            component's `documents` are the output.
        """
        self.pipeline_file = pipeline_file
        self.pipeline = load_pipeline(pipeline_file)
        self.input_mapping = retrieval_input_mapping(self.pipeline)
        self.output_mapping = {f"{next(iter(self.pipeline.outputs()))}.documents": "documents"}
