import re
import subprocess
import sys

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from gatehouse.components.preprocessors.section_splitter import SectionSplitter, slugify

MD = """---
title: API keys
url: https://docs.example.com/security/api-keys
---
# Keys overview

Keys identify your application to the API and must be kept secret at all times.

## Rotate an API key

Open Settings, choose API keys and click Rotate next to the key you want to replace.

## Scopes {#key-scopes}

Each key carries scopes that limit what it is allowed to do in your account.

## FAQ

First FAQ section explains where keys are shown in the console.

## FAQ

Second FAQ section explains who may create keys for a team.

```bash
# Not a heading inside a fence
curl -H "Authorization: Bearer KEY" https://api.example.com
```
"""


def md_doc(content: str = MD, **meta) -> Document:
    return Document(
        content=content,
        meta={"doc_id": "public/docs/api-keys.md", "source": "security/api-keys.md", "mime_type": "text/markdown",
              "kb": "docs", "tenant": "public", "file_path": "api-keys.md", **meta},
    )


def test_init():
    splitter = SectionSplitter(max_words=100, overlap_words=10, min_words=2, heading_level=2)
    assert (splitter.max_words, splitter.overlap_words, splitter.min_words, splitter.heading_level) == (100, 10, 2, 2)
    default = SectionSplitter()
    assert (default.max_words, default.overlap_words, default.min_words, default.heading_level) == (220, 30, 5, 3)
    assert (default.max_chunks, default.max_chunk_chars, default.max_heading_chars) == (5000, 8000, 500)
    assert SectionSplitter(max_chunk_chars=300).max_chunk_chars == 300


def test_init_max_chunk_chars_must_be_positive():
    with pytest.raises(ValueError, match="max_chunk_chars"):
        SectionSplitter(max_chunk_chars=0)
    with pytest.raises(ValueError, match="max_heading_chars"):
        SectionSplitter(max_heading_chars=0)


def test_init_overlap_too_large():
    with pytest.raises(ValueError, match="overlap_words"):
        SectionSplitter(max_words=10, overlap_words=10)


def test_to_dict():
    assert component_to_dict(SectionSplitter(max_words=50, overlap_words=5), "splitter") == {
        "type": "gatehouse.components.preprocessors.section_splitter.SectionSplitter",
        "init_parameters": {"max_words": 50, "overlap_words": 5, "min_words": 5, "heading_level": 3,
                            "max_chunks": 5000, "max_chunk_chars": 8000, "max_heading_chars": 500},
    }


def test_from_dict():
    data = component_to_dict(SectionSplitter(max_words=70, heading_level=2, max_chunk_chars=900,
                                             max_heading_chars=80), "splitter")
    restored = component_from_dict(SectionSplitter, data, "splitter")
    assert restored.max_words == 70 and restored.heading_level == 2 and restored.overlap_words == 30
    assert restored.max_chunk_chars == 900 and restored.max_heading_chars == 80


def test_run_a_document_over_max_chunks_raises_naming_the_limit():
    long = Document(content="\n\n".join(f"## Part {n}\n\nText of part {n}." for n in range(12)),
                    meta={"doc_id": "public/kb/long.md", "mime_type": "text/markdown"})
    assert len(SectionSplitter(min_words=1, max_chunks=12).run(documents=[long])["documents"]) == 12
    with pytest.raises(ValueError, match=r"long.md gives 12 chunks or more, over the limit of 11 .*max_chunks"):
        SectionSplitter(min_words=1, max_chunks=11).run(documents=[long])


def test_run_markdown_sections():
    chunks = SectionSplitter().run(documents=[md_doc()])["documents"]
    ids = [c.meta["section_id"] for c in chunks]
    assert ids == ["keys-overview", "rotate-an-api-key", "key-scopes", "faq", "faq-1"]
    by_id = {c.meta["section_id"]: c for c in chunks}
    # front matter title/url win over the H1; front matter text is not part of a chunk
    assert all(c.meta["title"] == "API keys" for c in chunks)
    assert all("---" not in c.content and "title:" not in c.content for c in chunks)
    assert by_id["rotate-an-api-key"].meta["url"] == "https://docs.example.com/security/api-keys#rotate-an-api-key"
    assert by_id["key-scopes"].meta["section"] == "Scopes"  # explicit {#id} stripped from the heading text
    assert by_id["key-scopes"].meta["url"].endswith("#key-scopes")
    assert by_id["faq-1"].meta["url"].endswith("#faq-1")
    assert by_id["rotate-an-api-key"].meta["heading_path"] == ["Keys overview", "Rotate an API key"]
    assert [c.meta["chunk_index"] for c in chunks] == [0, 1, 2, 3, 4]
    assert all("file_path" not in c.meta for c in chunks)
    assert all(c.meta["kb"] == "docs" and c.meta["doc_id"] == "public/docs/api-keys.md" for c in chunks)


def test_run_code_fence_heading_ignored():
    chunks = SectionSplitter().run(documents=[md_doc()])["documents"]
    assert "not-a-heading-inside-a-fence" not in {c.meta["section_id"] for c in chunks}
    last = chunks[-1]
    assert last.meta["section_id"] == "faq-1"
    assert "# Not a heading inside a fence" in last.content and "curl" in last.content


def test_run_title_from_h1_without_front_matter():
    text = "# Billing guide\n\nInvoices are sent on the first day of every month by email.\n"
    chunks = SectionSplitter().run(documents=[md_doc(text)])["documents"]
    assert len(chunks) == 1
    assert chunks[0].meta["title"] == "Billing guide"
    assert chunks[0].meta["section_id"] == "billing-guide"
    assert chunks[0].meta["url"] is None  # no url anywhere


def test_run_markdown_detected_by_extension():
    doc = Document(content="## Setup\n\nInstall the agent and start it with the default settings.",
                   meta={"source": "guide/setup.md", "doc_id": "x"})
    chunks = SectionSplitter().run(documents=[doc])["documents"]
    assert chunks[0].meta["section_id"] == "setup"
    assert chunks[0].meta["title"] == "setup"


def test_run_long_section_windowed_with_overlap():
    words = [f"w{i}" for i in range(50)]
    text = "## Long\n\n" + " ".join(words)
    chunks = SectionSplitter(max_words=20, overlap_words=5, min_words=1).run(documents=[md_doc(text)])["documents"]
    assert [c.content.split() for c in chunks] == [words[0:20], words[15:35], words[30:50]]
    assert all(c.meta["section_id"] == "long" for c in chunks)
    assert len({c.id for c in chunks}) == 3


def test_run_paragraphs_grouped_up_to_max_words():
    para = "one two three four five six"
    text = "## Group\n\n" + "\n\n".join([para] * 4)
    chunks = SectionSplitter(max_words=12, overlap_words=2, min_words=1).run(documents=[md_doc(text)])["documents"]
    assert [len(c.content.split()) for c in chunks] == [12, 12]


def test_run_plain_text_document():
    doc = Document(
        content="Refunds are issued within fourteen days.\n\nContact support to request one by email.",
        meta={"source": "billing/refund-policy.txt", "doc_id": "public/billing/refund-policy.txt",
              "mime_type": "text/plain", "url": "https://docs.example.com/refunds"},
    )
    chunks = SectionSplitter().run(documents=[doc])["documents"]
    assert len(chunks) == 1
    meta = chunks[0].meta
    assert meta["section_id"] is None and meta["section"] is None
    assert meta["url"] == "https://docs.example.com/refunds"  # document-level, no '#'
    assert meta["title"] == "refund policy"


def test_run_short_sections_dropped_and_empty_input():
    splitter = SectionSplitter()
    assert splitter.run(documents=[])["documents"] == []
    assert splitter.run(documents=[md_doc("## Tiny\n\nToo short.")])["documents"] == []
    assert splitter.run(documents=[Document(content="", meta={"source": "a.txt"})])["documents"] == []


def test_run_stable_ids():
    first = SectionSplitter().run(documents=[md_doc()])["documents"]
    second = SectionSplitter().run(documents=[md_doc()])["documents"]
    assert [c.id for c in first] == [c.id for c in second]
    assert len({c.id for c in first}) == len(first)
    other = SectionSplitter().run(documents=[md_doc(doc_id="public/docs/other.md")])["documents"]
    assert not {c.id for c in other} & {c.id for c in first}  # the id depends on the document


def test_run_unicode_heading_slug():
    assert slugify("Überblick & Schlüssel!") == "uberblick-schlussel"
    assert slugify("!!!") == "section"
    text = "## Café crème\n\nLe café est servi chaud tous les matins à huit heures."
    chunks = SectionSplitter().run(documents=[md_doc(text)])["documents"]
    assert chunks[0].meta["section_id"] == "cafe-creme"
    assert chunks[0].meta["section"] == "Café crème"


def test_run_text_without_spaces_is_cut_at_the_longest_chunk():
    word = "lorem" * 200_000  # 1 M characters, no space: one "word", so max_words never cuts it
    doc = Document(content=word, meta={"source": "one-word.txt", "doc_id": "public/kb/one-word.txt"})
    chunks = SectionSplitter(min_words=1).run(documents=[doc])["documents"]
    assert [len(c.content) for c in chunks] == [8000] * 125
    assert "".join(c.content for c in chunks) == word
    assert [c.meta["chunk_index"] for c in chunks] == list(range(125)) and len({c.id for c in chunks}) == 125


def test_run_a_long_line_is_cut_after_its_last_punctuation_or_space_before_the_bound():
    line = "".join(f"[{n}](https://example.com/{n});" for n in range(20_000))  # a minified markdown line
    text = f"## Links\n\n{line}\n\n## After\n\nA short section after the long line."
    chunks = SectionSplitter(min_words=1, max_chunk_chars=1000).run(documents=[md_doc(text)])["documents"]
    links = [c.content for c in chunks if c.meta["section_id"] == "links"]
    assert all(500 < len(piece) <= 1000 for piece in links[:-1]) and len(links[-1]) <= 1000
    assert all(re.fullmatch(r".*\W", piece, re.DOTALL) for piece in links[:-1])  # cut after punctuation, not in a word
    assert "".join(links) == line
    assert chunks[-1].content == "A short section after the long line."  # the next section is untouched
    words = " ".join(["w" * 30] * 100)  # spaces: a cut drops the space it falls on
    pieces = SectionSplitter(min_words=1, max_chunk_chars=200).run(documents=[md_doc(words)])["documents"]
    assert [len(p.content) for p in pieces] == [185] * 16 + [123] and " ".join(p.content for p in pieces) == words


def test_run_text_within_the_bound_is_split_as_before():
    chunks = SectionSplitter(max_chunk_chars=len(MD)).run(documents=[md_doc()])["documents"]
    assert [c.content for c in chunks] == [c.content for c in SectionSplitter().run(documents=[md_doc()])["documents"]]


def test_run_a_heading_full_of_spaces_is_parsed_in_linear_time():
    """The heading regular expression took cubic time (2,000 spaces: 40 s; these 20,000: hours)."""
    text = "# Spaced" + " " * 20_000 + "out {#spaced} #\n\nBody of the spaced section.\n\n## " + "x " * 20_000
    code = ("import sys; from haystack import Document; "
            "from gatehouse.components.preprocessors.section_splitter import SectionSplitter; "
            "doc = Document(content=sys.stdin.read(), meta={'source': 'spaced.md', 'doc_id': 'x'}); "
            "chunks = SectionSplitter(min_words=1, max_heading_chars=50_000).run(documents=[doc])['documents']; "
            "print(chunks[0].meta['section_id'], chunks[0].meta['section'][-8:], len(chunks), sep='|')")
    done = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "spaced|     out|1\n"


def test_run_a_long_table_is_cut_between_rows_each_window_led_in_by_its_caption():
    rows = [f"- Index: {n}; Name: Person {n} Smith; Company: Firm {n}; City: Town {n}" for n in range(40)]
    text = "## Customers\n\nCustomer list, in order:\n" + "\n".join(rows) + "\n\nSource: the CRM export of May."
    chunks = SectionSplitter(max_words=60, overlap_words=10).run(documents=[md_doc(text)])["documents"]
    assert len(chunks) > 5
    seen = []
    for chunk in chunks:
        lines = chunk.content.split("\n")
        if lines[0].startswith("Source"):
            continue
        assert lines[0] == "Customer list, in order:"  # the caption above the rows of every window
        assert all(line in rows for line in lines[1:] if line and not line.startswith("Source"))  # rows whole
        seen += [line for line in lines[1:] if line in rows]
    assert seen == rows  # each row once, in order: rows are not repeated as overlap


def test_run_a_long_page_is_cut_between_lines_with_prose_overlap_never_before_a_value():
    lines = [f"Line {n} repaints wall section {n}" for n in range(30)]
    page = "\n".join(line for pair in zip(lines, (f"{80 + n},00" for n in range(30))) for line in pair)
    doc = Document(content=page + "\nGRAND TOTAL\n5,738", meta={"source": "estimate.pdf", "doc_id": "x"})
    chunks = SectionSplitter(max_words=40, overlap_words=8).run(documents=[doc])["documents"]
    assert len(chunks) > 3
    for chunk in chunks:
        first = chunk.content.split("\n")[0]
        assert first.startswith("Line ") or first == "GRAND TOTAL"  # a window starts with a label, never a value
    assert all(len(c.content.split()) <= 40 for c in chunks)
    assert "GRAND TOTAL\n5,738" in chunks[-1].content
    assert chunks[1].content.startswith(chunks[0].content.split("\n")[-2])  # the last line pair is repeated


def test_run_a_windows_words_leave_out_the_column_names_each_row_repeats():
    rows = "\n".join(f"- Employee number: E{n}; Department of assignment: Finance" for n in range(12))
    chunks = SectionSplitter(max_words=12, overlap_words=2).run(documents=[md_doc("## Staff\n\n" + rows)])["documents"]
    assert [chunk.content.count("\n") + 1 for chunk in chunks] == [6, 6]  # two values a row: six rows a window


ROW_WORST_CASES = """
from haystack import Document
from gatehouse.components.preprocessors.section_splitter import SectionSplitter
from gatehouse.components.sentences import rows_as_words, sentence_settings, sentence_texts

texts = ["x" + " " * 420_000 + "y", "- a: b " * 60_000, "- a: " + "; " * 210_000, "- Name: Ada; Desk: 4B\\n" * 20_000]
for text in texts:
    chunks = SectionSplitter(min_words=1, max_chunks=10**6).run(
        documents=[Document(content=text, meta={"source": "a.txt", "doc_id": "x"})])["documents"]
    sentences = sum(len(sentence_texts(chunk, sentence_settings(None))) for chunk in chunks)
    print(len(chunks), sentences, rows_as_words(chunks[-1].content).count("Ada"))
"""


def test_run_table_rows_are_told_apart_in_linear_time():
    """Telling a table row from text searched one pattern from every position of a run of spaces or of list marks:
    40,000 characters took 24 s to split; these 420,000 would take most of an hour."""
    done = subprocess.run([sys.executable, "-c", ROW_WORST_CASES], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["2 2 0", "948 948 0", "1106 1106 0", "182 20000 16"]  # each row a sentence


def test_run_a_heading_or_front_matter_value_over_max_heading_chars_is_not_metadata():
    """Each chunk carries its heading path, and each sentence is embedded with the title: a huge one costs per chunk."""
    long = "word " * 30
    text = f"---\ntitle: {long}\nurl: https://example.com/{'p' * 200}\n---\n# {long}\n\nIntro.\n\n## Short\n\nBody."
    chunks = SectionSplitter(min_words=1, max_heading_chars=100).run(documents=[md_doc(text)])["documents"]
    assert [(c.meta["section"], c.meta["heading_path"]) for c in chunks] == [(None, []), ("Short", ["Short"])]
    assert chunks[0].content == f"# {long.strip()}\n\nIntro."  # the long heading stays as text
    assert {c.meta["title"] for c in chunks} == {"api-keys"} and {c.meta.get("url") for c in chunks} == {None}


def test_run_many_headings_of_one_name_are_numbered_in_linear_time():
    """Each `## a` looked for its number from 1 up: 17,000 of them took over a minute; 70,000 took hours."""
    code = ("import sys; from haystack import Document; "
            "from gatehouse.components.preprocessors.section_splitter import SectionSplitter; "
            "doc = Document(content='## a\\nx\\n' * 70_000 + '## a-3\\nx\\n', meta={'source': 'a.md', 'doc_id': 'x'}); "
            "ids = [c.meta['section_id'] for c in SectionSplitter(min_words=1, max_chunks=10**6)"
            ".run(documents=[doc])['documents']]; "
            "print(ids[:5], ids[-2:], len(set(ids)), sep='|')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "['a', 'a-1', 'a-2', 'a-3', 'a-4']|['a-69999', 'a-3-1']|70001\n"
