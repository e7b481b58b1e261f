"""
Test set-up: offline, quiet, and a fresh data directory per test session (stores and caches).

The embedding cache of the session's data directory is shared by the tests that start their own server or CLI with
another data directory, so the sample KBs' chunks and sentences are encoded once per session, not once per test.
"""

import os
import tempfile
from pathlib import Path

from gatehouse import runtime

runtime.configure()
os.environ["GATEHOUSE_DATA_DIR"] = tempfile.mkdtemp(prefix="gatehouse-test-data-")
os.environ["GATEHOUSE_EMBEDDING_CACHE"] = str(Path(os.environ["GATEHOUSE_DATA_DIR"]) / "embedding_cache")
