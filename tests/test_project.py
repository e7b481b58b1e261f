"""`gatehouse init` and where Gatehouse finds its project files."""

import re
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


def test_init_writes_editable_copies_that_take_precedence(tmp_path, monkeypatch):
    from gatehouse.pipelines import pipelines_dir
    from gatehouse.project import init_project
    from gatehouse.settings import project_path

    written = init_project(tmp_path / "proj")
    assert (tmp_path / "proj" / "pipelines" / "ask.yml") in written and (tmp_path / "proj" / "hayhooks.yml").is_file()
    with pytest.raises(FileExistsError, match="--force"):
        init_project(tmp_path / "proj")
    assert init_project(tmp_path / "proj", force=True) == written
    monkeypatch.delenv("GATEHOUSE_PIPELINES_DIR", raising=False)
    monkeypatch.chdir(tmp_path / "proj")
    assert pipelines_dir() == (tmp_path / "proj" / "pipelines").resolve()
    assert project_path("kb") == (tmp_path / "proj" / "kb").resolve()
    assert project_path("hayhooks.yml") == (tmp_path / "proj" / "hayhooks.yml").resolve()


def test_shipped_files_are_used_where_the_working_directory_has_none(tmp_path, monkeypatch):
    from gatehouse.settings import bundled_dir, data_dir, project_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEHOUSE_DATA_DIR", raising=False)
    (tmp_path / "pipelines").mkdir()  # an empty folder is not a project's own copy
    assert project_path("pipelines") == bundled_dir() / "pipelines"
    assert (bundled_dir() / "pipelines" / "ask.yml").is_file()
    assert data_dir() == (tmp_path / "data").resolve()


def test_no_sample_domain_words_in_components_or_default_yaml():
    """What a gate knows of a domain it learns from the knowledge base: the sample KBs' names stay in kb/."""
    plans = [heading[3:].strip() for heading in (PROJECT / "kb" / "product" / "pricing-plans.md").read_text()
             .splitlines() if heading.startswith("## ") and len(heading.split()) == 2]
    assert plans, "the sample pricing page names its plans in '## <Plan>' headings"
    words = re.compile(r"corvio|globex|quasar|\bcgw\b|\b(?:atlas|swift|coder|vista|embed)-\d|\b(?:"
                       + "|".join(re.escape(plan) for plan in plans) + r") plans?\b", re.IGNORECASE)
    files = [*(PROJECT / "components").rglob("*.py"), *(PROJECT / "pipelines").rglob("*.yml"), PROJECT / "hayhooks.yml"]
    found = [f"{path.relative_to(PROJECT)}:{number}: {line.strip()}" for path in files
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if words.search(line)]
    assert found == []
