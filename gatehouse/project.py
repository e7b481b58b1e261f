"""`gatehouse init`: a project folder with editable copies of the pipelines, the serving manifest and the sample KBs."""

import shutil
from pathlib import Path

from gatehouse.settings import bundled_dir

#: What `gatehouse init` copies: the files Gatehouse reads from the working directory in preference to its own.
PROJECT_FILES = ("pipelines", "hayhooks.yml", "kb")


class ProjectExistsError(FileExistsError):
    """The target folder already holds some of the files `init` would write."""


def init_project(directory: Path, *, force: bool = False) -> list[Path]:
    """
    Write editable copies of the shipped pipelines (`pipelines/*.yml`), serving manifest (`hayhooks.yml`) and sample
    knowledge bases (`kb/`) into `directory`. Run Gatehouse from that folder and it uses them (data goes to its
    `data/`).

    :param directory: The project folder (created when missing).
    :param force: Overwrite files that exist; without it, nothing is written when any would be overwritten.
    :returns: The files written.
    :raises ProjectExistsError: If files exist and `force` is False.
    """
    source = bundled_dir()
    plan: list[tuple[Path, Path]] = []
    for name in PROJECT_FILES:
        origin = source / name
        if origin.is_file():
            plan.append((origin, directory / name))
        else:
            patterns = ("**/*.yml",) if name == "pipelines" else ("**/*.md", "**/kb.yml")
            for pattern in patterns:
                plan += [(path, directory / name / path.relative_to(origin)) for path in sorted(origin.glob(pattern))]
    existing = [target for _, target in plan if target.exists()]
    if existing and not force:
        shown = ", ".join(str(path) for path in existing[:3]) + (" ..." if len(existing) > 3 else "")
        raise ProjectExistsError(f"{len(existing)} file(s) exist already ({shown}); pass --force to overwrite them.")
    for origin, target in plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin, target)
    return [target for _, target in plan]
