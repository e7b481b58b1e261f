"""
Documentation nobody wrote for Gatehouse (tests/fixtures/foreign_docs, a made-up site generator's MkDocs pages):
ingested with one command and no KB entry next to a sample KB that has one, then asked one question of each kind
through ask.yml (real MiniLM, Qdrant and BM25).
"""

import pytest

from gatehouse.ask import run_ask
from gatehouse.ingest import folder_group, ingest, path_groups
from gatehouse.pipelines import load_pipeline
from gatehouse.settings import project_path

DOCS = project_path("tests") / "fixtures" / "foreign_docs"


@pytest.fixture(scope="module")
def lantern(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GATEHOUSE_DATA_DIR", str(tmp_path_factory.mktemp("foreign-data")))
        groups = path_groups([str(DOCS)], kb="lantern", tenant=None, url_base="https://docs.lantern.example/")
        groups.append(folder_group(project_path("kb") / "product", kb="product", tenant=None))
        summary = ingest(groups, progress=False)
        assert summary.failed == [] and summary.documents_written >= 4
        pipeline = load_pipeline("ask")  # its stores open this module's data folder
        pipeline.warm_up()
        yield pipeline


def ask(pipeline, question: str, **fields) -> dict:
    return run_ask(pipeline, question, **fields)


def cited(response: dict, source: str) -> bool:
    return any(c["kb"] == "lantern" and c["source"] == source for c in response["citations"])


def test_settings_block_gives_the_value_and_links_the_heading(lantern):
    response = ask(lantern, "What port does the preview server listen on by default?")
    assert response["metadata"]["kb"] == "lantern"
    assert "4100" in response["answer"] and cited(response, "reference/settings.md")
    assert response["status"] == "success"
    url = next(c["url"] for c in response["citations"] if c["source"] == "reference/settings.md")
    assert url == "https://docs.lantern.example/reference/settings#lantern_port"


def test_table_row_keeps_its_column_headers(lantern):
    response = ask(lantern, "Since which version is the linkcheck plugin bundled?")
    assert "Since: 2.0" in response["answer"] and cited(response, "guide/plugins.md")


def test_html_table_row(lantern):
    response = ask(lantern, "When does support for Lantern 1 end?")
    assert "June 2025" in response["answer"] and cited(response, "faq.md")


def test_short_section_under_a_heading(lantern):
    response = ask(lantern, "What are the system requirements for Lantern?")
    assert "Python 3.10" in response["answer"] and cited(response, "guide/install.md")


def test_code_question_gets_the_code_with_its_lead_in(lantern):
    response = ask(lantern, "Show me the command that builds the site into the public folder")
    assert response["metadata"]["route"] == "retrieve"
    assert "lantern build --output public" in response["answer"] and cited(response, "guide/install.md")


def test_unanswerable_on_topic_question_is_not_a_success(lantern):
    response = ask(lantern, "How many plugins can be enabled at most in lantern.toml?")
    assert response["status"] in ("fallback", "partial")


def test_follow_up_and_two_part_question(lantern):
    history = [{"role": "user", "content": "Which theme renders pages by default?"},
               {"role": "assistant", "content": "The paper theme."}]
    follow_up = ask(lantern, "and which setting changes it?", history=history)
    assert "LANTERN_THEME" in follow_up["answer"]
    both = ask(lantern, "What is the default theme, and are draft pages rendered by default?")
    assert both["metadata"]["plan"]["strategy"] == "questions"
    assert "paper" in both["answer"] and "false" in both["answer"]


def test_sample_kb_with_its_own_entry_is_still_routed(lantern):
    assert ask(lantern, "How much does the Team plan cost?")["metadata"]["kb"] == "product"
