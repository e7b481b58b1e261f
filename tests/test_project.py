"""`gatehouse init` and where Gatehouse finds its project files."""

import pytest


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
