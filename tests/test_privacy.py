"""Nothing leaves the machine unless configured: importing Gatehouse turns Haystack's telemetry off first."""

import os
import subprocess
import sys


def run(code: str, home) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("HAYSTACK_TELEMETRY_ENABLED", "DO_NOT_TRACK")}
    return subprocess.run([sys.executable, "-c", code], env={**env, "HOME": str(home)}, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_importing_gatehouse_first_keeps_haystack_telemetry_off(tmp_path):
    out = run("import gatehouse.components.state; import haystack.telemetry._telemetry as t; import os; "
              "print(t.telemetry is None, os.environ['HAYSTACK_TELEMETRY_ENABLED'], os.environ['HF_HUB_OFFLINE'])",
              tmp_path)
    assert out == "True False 1"
    assert not (tmp_path / ".haystack").exists()


def test_haystack_imported_before_gatehouse_is_switched_off(tmp_path):
    assert run("import haystack; import gatehouse; import haystack.telemetry._telemetry as t; "
               "print(t.telemetry is None)", tmp_path) == "True"


def test_an_explicit_opt_in_is_respected(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "HAYSTACK_TELEMETRY_ENABLED": "True"}
    out = subprocess.run([sys.executable, "-c", "import gatehouse, os; print(os.environ['HAYSTACK_TELEMETRY_ENABLED'])"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True"
