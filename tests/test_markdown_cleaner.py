import subprocess
import sys

from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.preprocessors.markdown_cleaner import MarkdownCleaner, clean_markdown, html_to_text


def markdown(content: str) -> Document:
    return Document(content=content, meta={"mime_type": "text/markdown", "source": "guide.md"})


def test_init():
    assert MarkdownCleaner() is not None


def test_to_dict():
    data = component_to_dict(MarkdownCleaner(), "markdown")
    assert data["type"].endswith("markdown_cleaner.MarkdownCleaner")
    assert data["init_parameters"] == {}


def test_from_dict():
    data = component_to_dict(MarkdownCleaner(), "markdown")
    assert isinstance(component_from_dict(MarkdownCleaner, data, "markdown"), MarkdownCleaner)


def test_run_admonitions_become_labelled_paragraphs():
    text = '# Setup\n\n!!! warning "Deprecated"\n    The old flag is removed.\n    Use the new one.\n\nAfter.\n'
    out = MarkdownCleaner().run(documents=[markdown(text)])["documents"][0].content
    assert "Warning (Deprecated): The old flag is removed." in out
    assert "!!!" not in out and "After." in out


def test_run_tabs_and_directives():
    text = '=== "Sync"\n\n    ```python\n    client.get(url)\n    ```\n\n=== "Async"\n\n    Await it.\n\n' \
           '::: package.Client\n    :docstring:\n\nEnd.\n'
    out = clean_markdown(text)
    assert "Sync:" in out and "```python\nclient.get(url)\n```" in out and "Async:" in out
    assert ":::" not in out and ":docstring:" not in out and "End." in out


def test_run_template_tags():
    text = 'Ask in {% slack_channel "help-desk" %}.\n{% comment %}hidden note{% endcomment %}\n' \
           '{% include "steps.html" %}See [the page]({% page "/travel/" %}). Value {{ name }} {{ a | b }}.\n'
    out = clean_markdown(text)
    assert "Ask in help-desk." in out
    assert "hidden note" not in out and "steps.html" not in out and "{%" not in out
    assert "[the page](/travel/)" in out and "Value name ." in out


def test_run_html_tables_keep_their_column_headers():
    text = "Offices:\n\n<table><tr><th>City</th><th>Floor</th></tr><tr><td>Springfield</td><td>5th</td></tr></table>\n"
    assert "- City: Springfield; Floor: 5th" in clean_markdown(text)
    key_value = "<table><tr><td><b>Location</b></td><td>1 Main St.<br/>Springfield</td></tr></table>"
    assert "- Location: 1 Main St. Springfield" in html_to_text(key_value)


def test_run_pipe_tables_become_rows_with_headers():
    text = "| Option | Default |\n| --- | --- |\n| `retries` | 3 |\n| `timeout` | 5s |\n"
    out = clean_markdown(text)
    assert "- Option: `retries`; Default: 3" in out and "- Option: `timeout`; Default: 5s" in out


def test_run_code_front_matter_and_other_documents_untouched():
    text = '---\ntitle: "A <b> title"\n---\n```html\n<table><tr><td>x</td></tr></table>\n{% raw %}\n```\nUse `<br>` here.\n'
    out = clean_markdown(text)
    assert out.startswith('---\ntitle: "A <b> title"\n---\n')
    assert "<table><tr><td>x</td></tr></table>\n{% raw %}" in out and "`<br>`" in out
    plain = Document(content="!!! note\n    kept", meta={"mime_type": "text/plain", "source": "a.txt"})
    assert MarkdownCleaner().run(documents=[plain])["documents"][0].content == "!!! note\n    kept"


def test_run_scripts_and_frames_are_removed_autolinks_kept():
    out = html_to_text('<p>Hi <script>alert(1)</script><iframe src="x"></iframe> see <https://example.org></p>')
    assert "alert" not in out and "<https://example.org>" in out


def test_run_an_opener_without_its_end_stays_as_written():
    out = clean_markdown("Use {{ version }} here. {{ open, then {% tip 'a' %}, then {% open\n")
    assert out == "Use version here. {{ open, then a, then {% open\n"
    assert clean_markdown("`code` and ``a ` b`` and `open\n") == "`code` and ``a ` b`` and `open\n"
    # as html.parser made it: an open construct is text up to the next `>`
    assert clean_markdown("<p>Kept</p> <!-- open <b>and</b> <?pi\n") == "\n\nKept\n\n <!-- open <b>and <?pi\n"


# 420 KB each: openers without an end (and one nesting too deep), which the old patterns and html.parser read again to
# the end from every opener: 42 KB of `{{ ` took 20 s, and each doubling four times as long.
WORST_CASES = """
cases = {
    "expressions": "{{ " * 140_000,
    "tags": "{%a " * 105_000,
    "comments": "{% comment %}" * 32_300,
    "html comments": "<p>x</p>" + "<!--" * 105_000,
    "start tags": "<p>x</p>" + "<a " * 140_000,
    "end tags": "<p>x</p>" + "</x " * 105_000,
    "instructions": "<p>x</p>" + "<?x" * 140_000,
    "sections": "<p>x</p>" + "<![CDATA[" * 46_600,
    "quotes": "<p>x</p>" + "<a x='>' " * 46_600,
    "code": "`" * 210_000 + "a`" * 105_000,
    "table rule": "|a|\\n" + " " * 420_000 + "x",
    "nesting": "".join(" " * depth + "!!! note\\n" for depth in range(900)),
}
for name, text in cases.items():
    out = clean_markdown(text)
    print(name, len(text) // 1000, "kB", len(out) // 1000, "kB")
"""


def test_run_worst_case_markup_is_cleaned_in_linear_time():
    code = "from gatehouse.components.preprocessors.markdown_cleaner import clean_markdown\n" + WORST_CASES
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "expressions 420 kB 420 kB", "tags 420 kB 420 kB", "comments 419 kB 0 kB", "html comments 420 kB 420 kB",
        "start tags 420 kB 420 kB", "end tags 420 kB 420 kB", "instructions 420 kB 420 kB", "sections 419 kB 419 kB",
        "quotes 419 kB 93 kB", "code 420 kB 420 kB", "table rule 420 kB 420 kB", "nesting 412 kB 405 kB"]
