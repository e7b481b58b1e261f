import os
from pathlib import Path

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.rankers.ranker import Ranker

CROSS_ENCODER = os.environ.get("GATEHOUSE_TEST_CROSS_ENCODER")


def docs() -> list[Document]:
    return [
        Document(id="1", content="Invoices are emailed on the first of the month.", score=0.9),
        Document(id="2", content="To rotate an API key, open Settings and click Rotate.", score=0.8),
        Document(id="3", content="Single sign-on supports SAML.", score=0.7),
    ]


def test_init():
    ranker = Ranker(model="some/model", top_k=3, batch_size=4)
    assert (ranker.model, ranker.top_k, ranker.batch_size) == ("some/model", 3, 4)
    assert ranker._cross_encoder is None  # noqa: SLF001 - nothing loaded before warm_up
    assert (Ranker().model, Ranker().top_k, Ranker().batch_size) == (None, 10, 16)


def test_to_dict():
    assert component_to_dict(Ranker(top_k=5), "component") == {
        "type": "gatehouse.components.rankers.ranker.Ranker",
        "init_parameters": {"model": None, "top_k": 5, "batch_size": 16},
    }


def test_from_dict():
    restored = component_from_dict(
        Ranker, component_to_dict(Ranker(model="m", top_k=2, batch_size=8), "component"), "component"
    )
    assert (restored.model, restored.top_k, restored.batch_size) == ("m", 2, 8)


def test_run_no_model_keeps_order_and_cuts():
    ranker = Ranker(top_k=2)
    ranker.warm_up()  # a no-op without a model
    out = ranker.run(query="rotate key", documents=docs())["documents"]
    assert [d.id for d in out] == ["1", "2"]
    assert all("rerank_score" not in d.meta for d in out)
    assert [d.id for d in ranker.run(query="q", documents=docs(), top_k=3)["documents"]] == ["1", "2", "3"]
    assert ranker.run(query="q", documents=[])["documents"] == []
    assert ranker.run(query="q", documents=docs(), top_k=0)["documents"] == []  # 0 means none, not the default


def test_run_unloadable_model_raises():
    name = "gatehouse-tests/no-such-cross-encoder"
    ranker = Ranker(model=name)
    with pytest.raises(RuntimeError, match="no-such-cross-encoder"):
        ranker.run(query="rotate key", documents=docs())
    with pytest.raises(RuntimeError, match="model: null"):
        ranker.warm_up()


@pytest.mark.skipif(
    not (CROSS_ENCODER and Path(CROSS_ENCODER).is_dir()),
    reason="no cross-encoder weights available: set GATEHOUSE_TEST_CROSS_ENCODER to a local model folder",
)
def test_run_cross_encoder_reranks():
    ranker = Ranker(model=CROSS_ENCODER, top_k=2)
    out = ranker.run(query="How do I rotate an API key?", documents=docs())["documents"]
    assert len(out) == 2
    assert out[0].id == "2"
    assert all(isinstance(d.meta["rerank_score"], float) for d in out)
    assert out[0].meta["rerank_score"] >= out[1].meta["rerank_score"]
