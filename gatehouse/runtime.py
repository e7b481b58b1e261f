"""Process set-up shared by the command line and the tests: offline, quiet, no telemetry."""

import logging
import os
import sys
import warnings


def configure() -> None:
    """
    Set the environment Gatehouse runs in: offline model loading and no telemetry (already set by importing the
    package, `gatehouse.PRIVATE_ENVIRONMENT`), quiet libraries.
    """
    import gatehouse

    gatehouse.make_private()
    for key, value in {
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", category=UserWarning, module="qdrant_client")
    for name in ("haystack", "sentence_transformers", "transformers", "httpx", "qdrant_client"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if "transformers" in sys.modules:  # else TRANSFORMERS_VERBOSITY quiets it when it is imported
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        transformers_logging.set_verbosity_error()
