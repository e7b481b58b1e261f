import copy

import numpy as np
import pytest
from haystack import Pipeline, component

from gatehouse.components.embedders.vector import Vector
from gatehouse.components.retrievers.dense_retriever import DenseRetriever
from gatehouse.document_stores.dense_document_store import DenseDocumentStore


def test_init_copies_values_as_float32():
    source = np.array([0.6, 0.8])
    vector = Vector(source)
    source[0] = 9.0
    assert len(vector) == 2 and vector[0] == pytest.approx(0.6) and np.asarray(vector).dtype == np.float32


def test_sequence_of_python_floats():
    vector = Vector([0.25, 0.5, 1.0])
    assert list(vector) == [0.25, 0.5, 1.0] and vector.tolist() == [0.25, 0.5, 1.0]
    assert vector[1:] == [0.5, 1.0] and isinstance(vector[0], float)
    assert vector == [0.25, 0.5, 1.0] and vector == Vector([0.25, 0.5, 1.0]) and vector != Vector([0.25, 0.5, 0.0])
    assert hash(vector) == hash(Vector([0.25, 0.5, 1.0]))


def test_read_only():
    vector = Vector([1.0, 2.0])
    with pytest.raises(ValueError):
        np.asarray(vector)[0] = 5.0
    writable = np.array(vector, copy=True)
    writable[0] = 5.0
    assert list(vector) == [1.0, 2.0] and np.asarray(vector, dtype=np.float64).dtype == np.float64


def test_to_dict_from_dict():
    vector = Vector([0.5, 0.25])
    assert Vector.from_dict(vector.to_dict()) == vector


def test_copies_are_itself():
    vector = Vector([1.0, 2.0])
    assert copy.deepcopy(vector) is vector and copy.copy(vector) is vector


@component
class _Emit:
    def __init__(self) -> None:
        self.sent = None

    @component.output_types(embedding=Vector)
    def run(self, values: list[float]) -> dict:
        self.sent = Vector(values)
        return {"embedding": self.sent}


@component
class _Receive:
    def __init__(self) -> None:
        self.received = None

    @component.output_types(size=int)
    def run(self, embedding: list[float] | Vector) -> dict:
        self.received = embedding
        return {"size": len(embedding)}


def test_pipeline_passes_the_vector_itself():
    pipeline = Pipeline()
    emitter = _Emit()
    pipeline.add_component("emit", emitter)
    receiver = _Receive()
    pipeline.add_component("receive", receiver)
    pipeline.connect("emit.embedding", "receive.embedding")
    assert pipeline.run({"emit": {"values": [0.1] * 384}})["receive"]["size"] == 384
    assert receiver.received is emitter.sent  # handed on as itself, not rebuilt float by float


def test_retrievers_take_a_vector_or_a_list_from_an_embedder(tmp_path):
    from gatehouse.components.embedders.text_embedder import TextEmbedder

    pipeline = Pipeline()
    pipeline.add_component("embedder", TextEmbedder())
    store = DenseDocumentStore(path=str(tmp_path / "store"), index="test", embedding_dim=384)
    pipeline.add_component("retriever", DenseRetriever(document_store=store))
    pipeline.connect("embedder.embedding", "retriever.query_embedding")  # raises when the socket types do not fit
    assert pipeline.graph.has_edge("embedder", "retriever")
