"""BertEncoder gives SentenceTransformers' vectors for the packaged model, without importing sentence-transformers."""

import json
import subprocess
import sys

import numpy as np
import pytest

from gatehouse import settings
from gatehouse.components.embedders.bert_encoder import BertEncoder

TEXTS = ["How do I rotate an API key?", "x", "", "Ünïcödé naïve café — déjà vu 😀",
         "A long text that the model truncates at its maximum sequence length. " * 60,
         "Kubernetes pods crash-loop when the liveness probe fails."]


def test_supported_is_the_packaged_model_and_not_an_unknown_folder(tmp_path):
    assert BertEncoder.supported(settings.embedding_model())
    assert not BertEncoder.supported(str(tmp_path))
    assert not BertEncoder.supported("sentence-transformers/all-MiniLM-L6-v2")  # a Hub id: SentenceTransformers loads it


def test_vectors_equal_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    model = settings.embedding_model()
    ours = BertEncoder(model).encode(TEXTS, batch_size=4)
    theirs = SentenceTransformer(model, device="cpu").encode(TEXTS, batch_size=4, normalize_embeddings=True)
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_a_cls_pooled_folder_is_supported_and_pooled_by_its_first_token(tmp_path):
    import shutil

    folder = tmp_path / "cls"
    shutil.copytree(settings.embedding_model(), folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384,
                                                                   "pooling_mode_cls_token": True}))
    assert BertEncoder.supported(str(folder))
    cls, mean = BertEncoder(str(folder)).encode(TEXTS[:2]), BertEncoder(settings.embedding_model()).encode(TEXTS[:2])
    assert not np.allclose(cls, mean)


def test_the_embedding_backend_loads_it_without_sentence_transformers():
    probe = ("import sys\nfrom gatehouse.components.embedders.embedding import EmbeddingBackend\n"
             "EmbeddingBackend.get(cache_dir='off').embed(['hello'])\n"
             "print('sentence_transformers' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "False False"


@pytest.mark.parametrize("batch_size", [1, 3])
def test_batching_does_not_change_a_vector(batch_size):
    encoder = BertEncoder(settings.embedding_model())
    np.testing.assert_allclose(encoder.encode(TEXTS, batch_size=batch_size), encoder.encode(TEXTS, batch_size=32),
                               atol=1e-5)


def test_the_layers_run_on_packed_weights_with_the_default_kernels_results():
    import torch

    encoder = BertEncoder(settings.embedding_model())
    assert bool(encoder._packed) == torch.backends.mkldnn.is_available()  # noqa: SLF001
    packed = encoder.encode(TEXTS, batch_size=4)
    encoder._packed = {}  # noqa: SLF001  (as on a torch build without oneDNN)
    np.testing.assert_allclose(packed, encoder.encode(TEXTS, batch_size=4), atol=1e-5)
