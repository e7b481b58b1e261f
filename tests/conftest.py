"""Test set-up: offline, quiet, and a fresh data directory per test session (stores and caches)."""

import os
import tempfile

from gatehouse import runtime

runtime.configure()
os.environ["GATEHOUSE_DATA_DIR"] = tempfile.mkdtemp(prefix="gatehouse-test-data-")
