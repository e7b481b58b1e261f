"""Process set-up shared by the command line and the tests: offline, quiet, no telemetry."""

import logging
import os
import warnings


def configure() -> None:
    """Set the environment Gatehouse runs in: offline model loading, no telemetry, quiet libraries."""
    for key, value in {
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "RAGAS_DO_NOT_TRACK": "true",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", category=UserWarning, module="qdrant_client")
    for name in ("haystack", "sentence_transformers", "transformers", "httpx", "qdrant_client"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        transformers_logging.set_verbosity_error()
    except ImportError:
        pass
