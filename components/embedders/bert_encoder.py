"""
A SentenceTransformers folder of the common BERT shape (a `BertModel`, mean or CLS pooling, optionally normalised)
encoded with torch, the folder's `tokenizer.json` and its safetensors weights, without importing
sentence-transformers or transformers: the same vectors, a process that starts several seconds sooner. Any other
folder or model name is not `supported()`, and `EmbeddingBackend` loads it with SentenceTransformers as before.

Usage:
```python
from gatehouse.components.embedders.bert_encoder import BertEncoder

if BertEncoder.supported(path):
    encoder = BertEncoder(path)
    vectors = encoder.encode(["How do I rotate an API key?"], batch_size=32)   # float32, L2-normalised rows
```
"""

import json
from pathlib import Path

import numpy as np

TRANSFORMER = "sentence_transformers.models.Transformer"
POOLING = "sentence_transformers.models.Pooling"
NORMALIZE = "sentence_transformers.models.Normalize"


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


class BertEncoder:
    """Mean- or CLS-pooled BERT sentence vectors, as SentenceTransformers computes them for such a folder."""

    @staticmethod
    def supported(model: str) -> bool:
        """Whether `model` is a local folder this encoder reproduces exactly."""
        folder = Path(model)
        try:
            modules = [module["type"] for module in _read(folder / "modules.json")]
            config = _read(folder / "config.json")
            pooling = _read(folder / "1_Pooling" / "config.json")
        except (OSError, ValueError, KeyError, TypeError):
            return False
        modes = {key for key, value in pooling.items() if key.startswith("pooling_mode") and value}
        return (
            modules in ([TRANSFORMER, POOLING], [TRANSFORMER, POOLING, NORMALIZE])
            and config.get("model_type") == "bert"
            and config.get("hidden_act") == "gelu"
            and config.get("position_embedding_type", "absolute") == "absolute"
            and modes in ({"pooling_mode_mean_tokens"}, {"pooling_mode_cls_token"})
            and (folder / "tokenizer.json").is_file()
            and (folder / "model.safetensors").is_file()
        )

    def __init__(self, model: str) -> None:
        """
        :param model: A folder for which `supported()` is true.
        """
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        folder = Path(model)
        config = _read(folder / "config.json")
        pooling = _read(folder / "1_Pooling" / "config.json")
        self.normalize = NORMALIZE in [module["type"] for module in _read(folder / "modules.json")]
        self.cls_pooling = bool(pooling.get("pooling_mode_cls_token"))
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dimension = int(config["hidden_size"])
        max_length = int(config["max_position_embeddings"])
        settings_file = folder / "sentence_bert_config.json"
        if settings_file.is_file():
            max_length = min(max_length, int(_read(settings_file).get("max_seq_length") or max_length))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.no_padding()
        weights = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.weights = {name[len(prefix):]: tensor.float() for name, tensor in weights.items() if name.startswith(prefix)}
        self.pad_id = int(config.get("pad_token_id") or 0)
        self._torch = torch
        self._packed = self._pack()

    def _layer_norm(self, x, name: str):
        w = self.weights
        return self._torch.nn.functional.layer_norm(x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], self.eps)

    def _pack(self) -> dict:
        """
        The encoder layers' weights re-laid out for oneDNN's linear kernel, which multiplies the few rows of a query
        about 1.5 times faster than the default (same results to float rounding); empty, and the default is used,
        where this torch build has no oneDNN.
        """
        torch = self._torch
        if not torch.backends.mkldnn.is_available():
            return {}
        try:
            return {name: torch.ops.mkldnn._reorder_linear_weight(weight, None)
                    for name, weight in self.weights.items() if name.startswith("encoder.") and weight.dim() == 2}
        except (AttributeError, RuntimeError):
            return {}

    def _linear(self, x, name: str):
        weight, bias = f"{name}.weight", self.weights[f"{name}.bias"]
        packed = self._packed.get(weight)
        if packed is None:
            return self._torch.nn.functional.linear(x, self.weights[weight], bias)
        rows = self._torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, bias, "none", [], "")
        return rows.reshape(*x.shape[:-1], rows.shape[-1])

    def _forward(self, ids, mask):
        torch, w, functional = self._torch, self.weights, self._torch.nn.functional
        batch, length = ids.shape
        positions = torch.arange(length).unsqueeze(0)
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._layer_norm(x, "embeddings.LayerNorm")
        bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min  # padding gets no attention
        head_dim = self.dimension // self.heads
        for index in range(self.layers):
            name = f"encoder.layer.{index}"

            def heads(t):
                return t.view(batch, length, self.heads, head_dim).transpose(1, 2)

            query = heads(self._linear(x, f"{name}.attention.self.query"))
            key = heads(self._linear(x, f"{name}.attention.self.key"))
            value = heads(self._linear(x, f"{name}.attention.self.value"))
            context = functional.scaled_dot_product_attention(query, key, value, attn_mask=bias)
            context = context.transpose(1, 2).reshape(batch, length, self.dimension)
            x = self._layer_norm(x + self._linear(context, f"{name}.attention.output.dense"),
                                 f"{name}.attention.output.LayerNorm")
            hidden = functional.gelu(self._linear(x, f"{name}.intermediate.dense"))
            x = self._layer_norm(x + self._linear(hidden, f"{name}.output.dense"), f"{name}.output.LayerNorm")
        if self.cls_pooling:
            pooled = x[:, 0]
        else:
            weights = mask.unsqueeze(-1).float()
            pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return functional.normalize(pooled, p=2, dim=1) if self.normalize else pooled

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        """
        Sentence vectors of `texts`, in order (batched by length, as SentenceTransformers does).

        :returns: A float32 array of shape (len(texts), dimension).
        """
        torch = self._torch
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chosen = order[start : start + batch_size]
                length = max(len(encodings[i].ids) for i in chosen)
                ids = torch.full((len(chosen), length), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chosen), length), dtype=torch.long)
                for row, i in enumerate(chosen):
                    tokens = encodings[i].ids
                    ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
                    mask[row, : len(tokens)] = 1
                out[chosen] = self._forward(ids, mask).numpy()
        return out
