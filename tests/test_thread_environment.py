"""Importing gatehouse sets torch's OpenMP threads to sleep while they wait, before torch is imported; llama.cpp is
loaded without that default."""

import os
import subprocess
import sys

READ = "import gatehouse, os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"


def _run(env: dict[str, str], code: str = READ) -> str:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def test_importing_gatehouse_sets_a_passive_wait_policy_before_torch():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _run(env) == "PASSIVE False"


def test_a_wait_policy_already_set_is_kept():
    assert _run({**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}).startswith("ACTIVE ")


LOAD = ("import gatehouse, os; from gatehouse.llm.server import native_thread_environment\n"
        "with native_thread_environment(): inside = os.environ.get('OMP_WAIT_POLICY')\n"
        "print(inside, os.environ.get('OMP_WAIT_POLICY'))")


def test_llama_cpp_is_loaded_without_the_default_but_with_a_policy_the_caller_set():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _run(env, LOAD) == "None PASSIVE"  # restored for the rest of the process once llama.cpp is loaded
    assert _run({**env, "OMP_WAIT_POLICY": "PASSIVE"}, LOAD) == "PASSIVE PASSIVE"
