"""Importing gatehouse sets torch's OpenMP threads to sleep while they wait, before torch is imported."""

import os
import subprocess
import sys

READ = "import gatehouse, os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"


def _run(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def test_importing_gatehouse_sets_a_passive_wait_policy_before_torch():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _run(env) == "PASSIVE False"


def test_a_wait_policy_already_set_is_kept():
    assert _run({**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}).startswith("ACTIVE ")
