"""Splits documents into chunks: by markdown headings with stable section ids, by paragraphs otherwise."""

import hashlib
import re
import unicodedata
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from haystack import Document, component

from gatehouse.components.sentences import has_table_row, is_table_row
from gatehouse.components.tables import is_number

EXPLICIT_ID = re.compile(r"(?<!\s)\s*\{#([A-Za-z0-9_-]+)\}\s*$")  # tried once per run of spaces, not per space
FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)
LAST_BOUNDARY = re.compile(r".*\W", re.DOTALL)  # up to the last character that is not part of a word
LAST_LINE_END = re.compile(r".*\n", re.DOTALL)  # up to the last line break
MARKDOWN_TYPES = ("text/markdown", "text/x-markdown")
ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s")
_WORDS = re.compile(r"[^\W_]")


class _Piece(NamedTuple):
    """A paragraph, or a line of a paragraph too long for one window, as `_windows` packs them."""

    text: str
    words: int
    joiner: str  # what goes before it in a window: "\n\n" (a paragraph) or "\n" (a line)
    paragraph: int
    cut_before: bool  # a window may start with it
    lead: str | None  # the lead-in line of its list, repeated when a window starts with it
    prose: bool  # a line of prose (not a list item): repeated as overlap


def _may_cut(line: str, following: str) -> bool:
    """
    Whether a window may end after `line` with `following` next: not after a lead-in or label ending in ':', nor
    before a line that is only a figure (a form's value under its label: "GRAND TOTAL" over "5,738") or only signs
    (a currency sign on a line of its own), nor after such signs.
    """
    return not line.rstrip().endswith(":") and not is_number(following) and _WORDS.search(following) is not None \
        and _WORDS.search(line) is not None


def _words(text: str) -> int:
    """The words of a text as a window counts them: a table row's column names, repeated on every row, are not."""
    if not has_table_row(text):
        return len(text.split())
    return sum(sum(len(cell.split(": ", 1)[-1].split()) for cell in line.split("; ")) if is_table_row(line)
               else len(line.split()) for line in text.split("\n"))


def _pieces(text: str, max_words: int) -> list[_Piece]:
    """A section's paragraphs as pieces; a paragraph over `max_words` words (`_words`) as one piece per line."""
    pieces: list[_Piece] = []
    paragraphs = [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
    previous_last = ""
    for number, paragraph in enumerate(paragraphs):
        lines = [line.rstrip() for line in paragraph.split("\n") if line.strip()]
        words = _words(paragraph)
        if words <= max_words or len(lines) == 1:
            pieces.append(_Piece(paragraph.strip(), words, "\n\n", number, True, None, False))
        else:
            lead = previous_last if previous_last.endswith(":") and ITEM.match(lines[0]) else None
            for position, line in enumerate(lines):
                if position and ITEM.match(line) and lines[position - 1].endswith(":") \
                        and not ITEM.match(lines[position - 1]):
                    lead = lines[position - 1].strip()
                elif not ITEM.match(line):
                    lead = None
                cut = position == 0 or _may_cut(lines[position - 1], line)
                pieces.append(_Piece(line if position else line.strip(), _words(line),
                                     "\n" if position else "\n\n", number, cut, lead, not ITEM.match(line)))
        previous_last = paragraph.strip().rsplit("\n", 1)[-1].strip()
    return pieces


def _joined(pieces: list[_Piece]) -> str:
    return (pieces[0].text.lstrip() + "".join(piece.joiner + piece.text for piece in pieces[1:])).strip()


def markdown_heading(line: str) -> tuple[int, str] | None:
    """
    The level and text of a markdown heading line (`## Setup ##` -> `(2, "Setup")`), else None: one to six '#', a
    space, the text, optional closing '#'s. String methods, not a regular expression: `(.+?)\\s*#*\\s*$` took time
    cubic in the length of a heading full of spaces.
    """
    level = len(line) - len(line.lstrip("#"))
    rest = line[level:]
    if not 1 <= level <= 6 or len(rest) < 2 or not rest[0].isspace():
        return None
    text = rest.lstrip()
    if not text:
        return level, rest[-1]
    return level, text.rstrip().rstrip("#").rstrip() or text[0]


def slugify(text: str) -> str:
    """
    A heading's anchor, as documentation sites make them (Python-Markdown, GitHub): lower case, punctuation dropped,
    spaces to '-', underscores kept ("LISTEN_PORT" -> "listen_port").
    """
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text.lower()).strip()
    return re.sub(r"[\s-]+", "-", text) or "section"


@component
class SectionSplitter:
    """
    Splits documents into chunks that remember where they came from.

    Markdown is split at headings up to `heading_level`; each chunk carries `section` (heading text),
    `section_id` (an explicit `{#id}` on the heading, else its slug, made unique within the document) and
    `heading_path`. Front matter `title` and `url` become metadata, and `url` gets `#section_id` appended.
    Other text is split into paragraph groups with no section id (citations then point at the document).
    Long sections are split into windows of at most `max_words` words with `overlap_words` overlap; a window still
    longer than `max_chunk_chars` characters (text with few or no spaces: a minified line, one word repeated) is cut
    into pieces of at most that many, each after the last space or punctuation in its second half, else at the bound.
    A heading longer than `max_heading_chars` is a line of text, not a section, and a front matter `title` or `url`
    that long is left out: each chunk carries them, and each sentence is embedded with the title.
    Chunk ids are stable: a hash of the document id, the chunk's position and its text.

    Usage:
    ```python
    from haystack import Document
    from gatehouse.components.preprocessors.section_splitter import SectionSplitter

    doc = Document(content="# Keys\\n\\n## Rotate an API key\\n\\nOpen Settings.", meta={"doc_id": "public/faq/keys.md",
                   "mime_type": "text/markdown"})
    chunks = SectionSplitter().run(documents=[doc])["documents"]
    chunks[0].meta["section_id"]   # "rotate-an-api-key"
    ```
    """

    def __init__(
        self, *, max_words: int = 220, overlap_words: int = 30, min_words: int = 5, heading_level: int = 3,
        max_chunks: int = 5000, max_chunk_chars: int = 8000, max_heading_chars: int = 500,
    ) -> None:
        """
        :param max_words: Longest chunk, in words.
        :param overlap_words: Words repeated between consecutive windows of one long section.
        :param min_words: Sections with fewer words are dropped (a heading with no text).
        :param heading_level: Deepest heading level that starts a new section.
        :param max_chunks: Most chunks one document may give (each is embedded and stored); a document over it
            raises, so that a huge file fails alone instead of holding the ingest for a long time.
        :param max_chunk_chars: Longest chunk, in characters: what the embedders, the BM25 analysis and every ask
            that retrieves the chunk work on.
        :param max_heading_chars: Longest heading that starts a section, and longest front matter `title` or `url`
            that is kept, in characters.
        """
        if overlap_words >= max_words:
            raise ValueError("overlap_words must be smaller than max_words.")
        if max_chunks < 1:
            raise ValueError("max_chunks must be at least 1.")
        if max_chunk_chars < 1 or max_heading_chars < 1:
            raise ValueError("max_chunk_chars and max_heading_chars must be at least 1.")
        self.max_words = max_words
        self.overlap_words = overlap_words
        self.min_words = min_words
        self.heading_level = heading_level
        self.max_chunks = max_chunks
        self.max_chunk_chars = max_chunk_chars
        self.max_heading_chars = max_heading_chars

    def _windows(self, text: str) -> list[str]:
        """
        A section's text in windows of at most `max_words` words: paragraphs are grouped whole; a longer paragraph
        is cut between its lines (a table's rows, a list's items, a page's lines), never after a label whose value
        follows (`_may_cut`), a cut list's lead-in line repeated above its other items and `overlap_words` of prose
        lines repeated; a line longer than `max_words` is cut into word windows with that overlap.
        """
        windows: list[str] = []
        current: list[_Piece] = []
        carried = 0  # pieces at the start of `current` repeated from the window before
        for piece in _pieces(text, self.max_words):
            if piece.words > self.max_words:  # one line longer than a window
                if len(current) > carried:
                    windows.append(_joined(current))
                current, carried = [], 0
                tokens = piece.text.split()
                step = self.max_words - self.overlap_words
                for start in range(0, len(tokens), step):
                    windows.append(" ".join(tokens[start : start + self.max_words]))
                    if start + self.max_words >= len(tokens):
                        break
                continue
            if len(current) > carried and sum(part.words for part in current) + piece.words > self.max_words:
                cut = len(current)
                if not piece.cut_before:
                    cut = next((at for at in range(len(current) - 1, carried, -1) if current[at].cut_before), cut)
                windows.append(_joined(current[:cut]))
                start = self._carried(current[:cut], current[cut:] or [piece])
                current, carried = start + current[cut:], len(start)
            current.append(piece)
        if len(current) > carried:
            windows.append(_joined(current))
        return [part for window in windows for part in self._bounded(window)]

    def _carried(self, before: list["_Piece"], after: list["_Piece"]) -> list["_Piece"]:
        """What a window cut inside a paragraph starts with: the list's lead-in, else the last prose lines."""
        first = after[0]
        if first.lead is not None:
            return [_Piece(first.lead, len(first.lead.split()), "", first.paragraph, True, None, False)]
        if first.joiner != "\n":
            return []
        carried: list[_Piece] = []
        for piece in reversed(before):
            words = sum(part.words for part in carried) + piece.words
            if piece.paragraph != first.paragraph or not piece.prose or words > self.overlap_words:
                break
            carried.insert(0, piece)
        while carried and not carried[0].cut_before:  # the overlap starts where a window may: not at a value
            carried.pop(0)
        return carried

    def _bounded(self, text: str) -> list[str]:
        """`text` in pieces of at most `max_chunk_chars` characters (itself when it is not longer)."""
        if len(text) <= self.max_chunk_chars:
            return [text]
        pieces, start = [], 0
        while len(text) - start > self.max_chunk_chars:
            end = start + self.max_chunk_chars
            boundary = LAST_LINE_END.match(text, start + self.max_chunk_chars // 2, end) or \
                LAST_BOUNDARY.match(text, start + self.max_chunk_chars // 2, end)
            cut = boundary.end() if boundary else end
            pieces.append(text[start:cut].strip())
            start = cut
        pieces.append(text[start:].strip())
        return [piece for piece in pieces if piece]

    def _markdown_sections(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        sections: list[dict[str, Any]] = []
        title = None
        stack: list[tuple[int, str]] = []
        current: dict[str, Any] = {"heading": None, "id": None, "path": [], "lines": []}
        in_code = False
        for line in text.splitlines():
            if line.strip().startswith("```"):
                in_code = not in_code
            found = None if in_code else markdown_heading(line)
            if found and found[0] <= self.heading_level and len(found[1]) <= self.max_heading_chars:
                sections.append(current)
                level, heading = found
                explicit = EXPLICIT_ID.search(heading)
                heading = EXPLICIT_ID.sub("", heading).strip()
                if level == 1 and title is None:
                    title = heading
                stack = [(lvl, h) for lvl, h in stack if lvl < level] + [(level, heading)]
                current = {
                    "heading": heading,
                    "id": explicit.group(1) if explicit else slugify(heading),
                    "path": [h for _, h in stack],
                    "lines": [],
                }
            else:
                current["lines"].append(line)
        sections.append(current)
        return title, sections

    def _chunk_document(self, document: Document) -> list[Document]:
        text = document.content or ""
        meta = {key: value for key, value in document.meta.items() if key not in {"file_path"}}
        front = FRONT_MATTER.match(text)
        if front:
            try:
                data = yaml.safe_load(front.group(1)) or {}
            except yaml.YAMLError:
                data = {}
            if isinstance(data, dict):
                meta.update({k: v for k, v in data.items() if k in {"title", "url"} and isinstance(v, str)
                             and len(v) <= self.max_heading_chars})
            text = text[front.end() :]
        source = str(meta.get("source") or "")
        is_markdown = meta.get("mime_type") in MARKDOWN_TYPES or source.lower().endswith((".md", ".markdown"))
        if is_markdown:
            heading_title, sections = self._markdown_sections(text)
            meta.setdefault("title", heading_title or Path(source).stem)
        else:
            meta.setdefault("title", Path(source).stem.replace("-", " ").replace("_", " ") or "Untitled")
            sections = [{"heading": None, "id": None, "path": [], "lines": text.splitlines()}]
        base_url = meta.get("url")
        chunks: list[Document] = []
        used_ids: set[str] = set()
        next_suffix: dict[str, int] = {}  # per id, where to look for the next free `<id>-<n>`
        for section in sections:
            body = "\n".join(section["lines"]).strip()
            if len(body.split()) < self.min_words:
                continue
            section_id = section["id"]
            if section_id:
                section_id = _unique(section_id, used_ids, next_suffix)
            for window in self._windows(body):
                index = len(chunks)
                if index == self.max_chunks:
                    name = document.meta.get("doc_id") or document.meta.get("file_path") or "a document"
                    raise ValueError(f"{name} gives {index + 1} chunks or more, over the limit of {self.max_chunks} "
                                     "per file (splitter.max_chunks in index.yml)")
                chunk_meta = {
                    **meta,
                    "section": section["heading"],
                    "section_id": section_id,
                    "heading_path": section["path"],
                    "chunk_index": index,
                    "url": f"{base_url}#{section_id}" if base_url and section_id else base_url,
                }
                digest = hashlib.sha256(f"{meta.get('doc_id', '')}\x00{index}\x00{window}".encode()).hexdigest()
                chunks.append(Document(id=digest, content=window, meta=chunk_meta))
        return chunks

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Split documents into chunks.

        :param documents: Converted documents (markdown keeps its headings).
        :returns: `documents`, the chunks, in document order.
        :raises ValueError: When a document gives more than `max_chunks` chunks (raised as soon as it does).
        """
        return {"documents": [chunk for document in documents for chunk in self._chunk_document(document)]}


def _unique(section_id: str, used: set[str], next_suffix: dict[str, int]) -> str:
    """
    `section_id`, or when it is taken `<section_id>-<n>` with the smallest free n (adding it to `used`); the search
    starts where the last one for this id ended, so many headings of one name take linear time.
    """
    if section_id not in used:
        used.add(section_id)
        return section_id
    suffix = next_suffix.get(section_id, 1)
    while f"{section_id}-{suffix}" in used:
        suffix += 1
    next_suffix[section_id] = suffix + 1
    used.add(f"{section_id}-{suffix}")
    return f"{section_id}-{suffix}"
