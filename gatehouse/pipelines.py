"""Loading Gatehouse's YAML pipelines safely: an allowlist for our own modules, never unsafe deserialisation."""

import os
from pathlib import Path

from haystack import Pipeline

from components.settings import PROJECT_ROOT

ALLOWED_MODULES = ["components.*"]


def pipelines_dir() -> Path:
    """The folder of the YAML pipelines (`GATEHOUSE_PIPELINES_DIR`, default `<project>/pipelines`)."""
    return Path(os.environ.get("GATEHOUSE_PIPELINES_DIR") or PROJECT_ROOT / "pipelines").resolve()


def pipeline_path(name_or_path: str | Path) -> Path:
    """
    The YAML file of a pipeline: a name (`ask`) is a file of the pipelines folder; a relative path that does not
    exist from here is taken relative to that folder.
    """
    path = Path(name_or_path)
    if path.suffix not in {".yml", ".yaml"}:
        return pipelines_dir() / f"{name_or_path}.yml"
    if not path.is_absolute() and not path.exists():
        return pipelines_dir() / path
    return path


def load_pipeline(name_or_path: str | Path) -> Pipeline:
    """
    Load a pipeline by name (`ask`, `index`, `retrieve`) or by path, with Gatehouse's modules allowlisted.

    :param name_or_path: A pipeline name in the pipelines folder, or a YAML file path.
    :returns: The loaded pipeline.
    :raises FileNotFoundError: If no such YAML file exists.
    """
    path = pipeline_path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"No pipeline YAML at {path}.")
    with path.open(encoding="utf-8") as handle:
        return Pipeline.load(handle, allowed_modules=ALLOWED_MODULES)
