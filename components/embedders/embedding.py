"""
The embedding backend shared by every Gatehouse component that needs vectors.

One model is loaded per process and model name, however many components use it and whatever cache each one uses
(the intent gate, the router, the embedders and the citation verifier all embed): a SentenceTransformers folder of
the common BERT shape (the shipped all-MiniLM-L6-v2) through `BertEncoder`, which gives the same vectors without
importing sentence-transformers, any other model through SentenceTransformers. Embeddings can be cached on disk,
keyed by the model and the SHA-256 of the text, so that re-ingesting a corpus does not encode it again; the
`RECENT_TEXTS` texts a model encoded last are also kept in memory, whatever the cache (a question is embedded by
retrieval and again by the gates after it).

Usage:
```python
from gatehouse.components.embedders.embedding import EmbeddingBackend

backend = EmbeddingBackend.get(model=None, cache_dir=None)   # defaults from gatehouse.settings
vectors = backend.embed(["How do I rotate an API key?"])   # numpy array, one L2-normalised row per text
```

The embedders take their model and cache as `model` and `cache_dir` settings and get the backend for them through
`EmbeddingModel` (a base class: `warm_up` and `backend()`).
"""

import hashlib
import logging
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gatehouse import settings
from gatehouse.components.embedders.bert_encoder import BertEncoder
from gatehouse.document_stores.errors import data_dir_error

logger = logging.getLogger(__name__)


class EmbeddingCache:
    """A SQLite table of float32 vectors keyed by (model, text hash)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "embeddings.sqlite"
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (model TEXT, text_hash TEXT, vector BLOB, "
            "PRIMARY KEY (model, text_hash))"
        )
        self._conn.commit()

    @staticmethod
    def key(text: str) -> str:
        """The cache key of a text."""
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get_many(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        """Cached vectors for the given hashes (missing ones are absent from the result)."""
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                chunk = hashes[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT text_hash, vector FROM embeddings WHERE model = ? AND text_hash IN ({marks})",  # noqa: S608
                    [model, *chunk],
                ).fetchall()
                for text_hash, blob in rows:
                    found[text_hash] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, model: str, items: dict[str, np.ndarray]) -> None:
        """
        Store vectors by hash. Best effort on a read-only or full data folder: nothing is stored and a warning is
        logged, so a question is still answered (its vectors are only computed again next time).

        :raises sqlite3.Error: Any other failure of the cache file.
        """
        with self._lock:
            try:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO embeddings (model, text_hash, vector) VALUES (?, ?, ?)",
                    [(model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in items.items()],
                )
                self._conn.commit()
            except sqlite3.Error as error:
                operator_error = data_dir_error(error, self.path.parent)
                if operator_error is None:
                    raise
                self._conn.rollback()
                logger.warning("embeddings not cached: %s", operator_error)


#: Texts whose vectors each model keeps in memory, the most recently embedded: a question is embedded by retrieval
#: and again by the gates after it, each with its own cache setting, and is encoded once.
RECENT_TEXTS = 256


class EmbeddingBackend:
    """A loaded model plus an optional disk cache; obtain instances with `EmbeddingBackend.get()`."""

    _instances: ClassVar[dict[tuple[str, str], "EmbeddingBackend"]] = {}
    _models: ClassVar[dict[str, tuple[Any, threading.Lock, "OrderedDict[str, np.ndarray]"]]] = {}
    _instances_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, model: str, cache_dir: Path | None) -> None:
        self.model_name = model
        shared = self._models.get(model)
        if shared is None:
            shared = (self._load(model), threading.Lock(), OrderedDict())
            self._models[model] = shared
        # one model, one encoding at a time and one memory of recent texts per process, whatever the cache
        self.model, self._encode_lock, self._recent = shared
        self.cache = EmbeddingCache(cache_dir) if cache_dir is not None else None
        self.encoded_count = 0

    @staticmethod
    def _load(model: str) -> Any:
        if BertEncoder.supported(model):
            return BertEncoder(model)
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(model, device="cpu", local_files_only=settings.models_offline())

    @classmethod
    def get(cls, model: str | None = None, cache_dir: str | Path | None = None) -> "EmbeddingBackend":
        """
        The process-wide backend for a model and cache directory.

        :param model: Model path or name; None uses `GATEHOUSE_EMBEDDING_MODEL` or the packaged MiniLM.
        :param cache_dir: Cache directory; None uses the configured default, `"off"` disables the cache.
        """
        resolved_model = model or settings.embedding_model()
        if cache_dir is None:
            resolved_cache = settings.embedding_cache_dir()
        elif str(cache_dir).lower() == "off":
            resolved_cache = None
        else:
            resolved_cache = Path(cache_dir).expanduser().resolve()
        key = (resolved_model, str(resolved_cache))
        with cls._instances_lock:
            if key not in cls._instances:
                cls._instances[key] = cls(resolved_model, resolved_cache)
            return cls._instances[key]

    @property
    def dimension(self) -> int:
        """The embedding dimension."""
        if isinstance(self.model, BertEncoder):
            return self.model.dimension
        return int(self.model.get_sentence_embedding_dimension())

    def embed(self, texts: list[str], *, batch_size: int = 32, progress_bar: bool = False) -> np.ndarray:
        """
        Embed texts, L2-normalised, reading and filling the disk cache when one is configured.

        :param texts: The texts to embed.
        :param batch_size: Encoding batch size.
        :param progress_bar: Show a progress bar while encoding.
        :returns: A float32 array of shape (len(texts), dimension).
        """
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        hashes = [EmbeddingCache.key(text) for text in texts]
        cached = self.cache.get_many(self.model_name, list(set(hashes))) if self.cache else {}
        with self._encode_lock:
            recalled = {h: self._recent[h] for h in set(hashes) if h not in cached and h in self._recent}
        if recalled and self.cache:
            self.cache.put_many(self.model_name, recalled)  # the disk cache holds what this backend embedded
        cached.update(recalled)
        missing = list(dict.fromkeys(h for h in hashes if h not in cached))
        if missing:
            by_hash = dict(zip(hashes, texts))
            with self._encode_lock:
                if isinstance(self.model, BertEncoder):
                    vectors = self.model.encode([by_hash[h] for h in missing], batch_size=batch_size)
                    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
                else:
                    vectors = self.model.encode(
                        [by_hash[h] for h in missing],
                        batch_size=batch_size,
                        normalize_embeddings=True,
                        show_progress_bar=progress_bar,
                        convert_to_numpy=True,
                    )
                self.encoded_count += len(missing)
            fresh = {h: np.asarray(v, dtype=np.float32) for h, v in zip(missing, vectors)}
            if self.cache:
                self.cache.put_many(self.model_name, fresh)
            cached.update(fresh)
            with self._encode_lock:
                for h in missing[-RECENT_TEXTS:]:
                    self._recent[h] = fresh[h]
                    self._recent.move_to_end(h)
                while len(self._recent) > RECENT_TEXTS:
                    self._recent.popitem(last=False)
        return np.stack([cached[h] for h in hashes]).astype(np.float32)


class EmbeddingModel:
    """
    The base of a component whose `model` and `cache_dir` settings name its embedding model and cache: `warm_up`
    loads the process-wide backend for them, `backend()` gives it (loaded on first use).
    """

    model: str | None
    cache_dir: str | None
    _backend: EmbeddingBackend | None = None

    def warm_up(self) -> None:
        """Load the model."""
        if self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.model, cache_dir=self.cache_dir)

    def backend(self) -> EmbeddingBackend:
        """The backend of `model` and `cache_dir`, loaded on first use."""
        self.warm_up()
        assert self._backend is not None
        return self._backend
