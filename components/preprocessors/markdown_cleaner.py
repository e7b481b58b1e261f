"""Turns the markdown dialects of documentation sites into plain markdown before splitting."""

import re
import textwrap
from collections.abc import Callable
from html import unescape
from typing import Any

from haystack import Document, component

from gatehouse.components.html_tokens import attributes, html_tokens
from gatehouse.components.tables import table_rows

MARKDOWN_TYPES = ("text/markdown", "text/x-markdown")
FRONT_MATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)
_FENCE = re.compile(r"^\s*(```|~~~)")
_ADMONITION = re.compile(r'^(?P<indent>\s*)(?:!!!|\?\?\?\+?)\s*(?P<kind>[\w-]+)(?:\s+"(?P<title>[^"]*)")?\s*$')
_TAB = re.compile(r'^(?P<indent>\s*)===\+?\s*"(?P<title>[^"]*)"\s*$')
_DIRECTIVE = re.compile(r"^\s*:::\s+\S+")
# Template tags, each found by its opener then the first end after it (`%}`, `}}`): a lazy `.*?` between the two
# re-read the rest of the text from every opener without an end, quadratic in the text.
_LIQUID_OPEN = re.compile(r"\{%-?\s*(?P<name>\w+)")
_COMMENT_OPEN = re.compile(r"\{%-?\s*comment\s*-?%\}")
_COMMENT_CLOSE = re.compile(r"\{%-?\s*endcomment\s*-?%\}")
_EXPRESSION_OPEN = re.compile(r"\{\{-?\s*")
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")
_BACKTICKS = re.compile(r"`+")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE = re.compile(r"^\s*(?:\|\s*)?:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*(?:\|\s*)?$")  # each space once
_HTML_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
#: How deep admonitions and tabs nest and are still unfolded; each level reads its body again.
MAX_NESTING = 8
#: Template tags that only steer the template (no text of the page): dropped with their arguments.
CONTROL_TAGS = frozenset("""if elsif else endif unless endunless for endfor case when endcase include include_relative
    render raw endraw assign capture endcapture block endblock extends set endset macro endmacro import from with
    endwith cycle increment decrement break continue tablerow endtablerow liquid""".split())
_BLOCK_TAGS = frozenset("p div section article header footer aside nav ul ol h1 h2 h3 h4 h5 h6 blockquote pre "
                        "figure figcaption details summary dl dt dd hr main".split())
_SKIP_TAGS = frozenset(["script", "style", "iframe", "video", "audio", "svg", "noscript", "template"])
#: Inline HTML whose tags are dropped and text kept; a tag outside every list (`<https://...>`) is text.
_INLINE_TAGS = frozenset("a abbr b bdi bdo cite code data dfn em i kbd mark q s samp small span strong sub sup time u "
                         "var del ins font center caption colgroup col thead tbody tfoot source picture".split())


class _HTMLText:
    """Text of an HTML fragment as markdown: tables as rows with headers, lists as items, links as their text."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.skip = 0
        self.tables: list[dict[str, Any]] = []

    def _text(self, text: str) -> None:
        if self.tables:
            table = self.tables[-1]
            if table["cell"] is not None:
                table["cell"].append(text)
            return
        self.out.append(text)

    def handle_starttag(self, tag: str, tag_text: str) -> None:
        if not self._known(tag):
            self._text(tag_text)
            return
        if tag in _SKIP_TAGS:
            self.skip += 1
        if self.skip:
            return
        if tag == "table":
            self.tables.append({"rows": [], "row": None, "cell": None, "header": []})
        elif self.tables and tag == "tr":
            self.tables[-1]["row"] = []
        elif self.tables and tag in ("td", "th"):
            self.tables[-1]["cell"] = []
            self.tables[-1]["is_header"] = tag == "th"
        elif tag == "br":
            self._text(" " if self.tables else "\n")
        elif tag == "img":
            alt = attributes(tag_text).get("alt")
            if alt:
                self._text(alt)
        elif tag == "li":
            self._text("\n- ")
        elif tag in _BLOCK_TAGS:
            self._text(" " if self.tables else "\n\n")

    @staticmethod
    def _known(tag: str) -> bool:
        return tag in _BLOCK_TAGS or tag in _SKIP_TAGS or tag in _INLINE_TAGS or tag in (
            "table", "tr", "td", "th", "br", "img", "li")

    def handle_endtag(self, tag: str) -> None:
        if not self._known(tag):
            self._text(f"</{tag}>")
            return
        if tag in _SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip or not self.tables:
            if tag in _BLOCK_TAGS and not self.skip:
                self._text("\n\n")
            return
        table = self.tables[-1]
        if tag in ("td", "th") and table["cell"] is not None and table["row"] is not None:
            table["row"].append(("".join(table["cell"]), table.get("is_header", False)))
            table["cell"] = None
        elif tag == "tr" and table["row"] is not None:
            row = table["row"]
            if row and all(is_header for _, is_header in row) and not table["header"]:
                table["header"] = [text for text, _ in row]
            elif len(row) > 1 and row[0][1] and not table["header"]:  # a row header: "Location | 230 S. ..."
                table["rows"].append([f"{' '.join(row[0][0].split())}: {' '.join(text for text, _ in row[1:])}"])
            elif row:
                table["rows"].append([text for text, _ in row])
            table["row"] = None
        elif tag == "table":
            self.tables.pop()
            header = table["header"] or []
            self._text("\n\n" + "\n".join(table_rows(header, table["rows"])) + "\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self._text(data)

    def text(self) -> str:
        """The converted text."""
        return "".join(self.out)


def html_to_text(fragment: str) -> str:
    """Markdown text of an HTML fragment (tags removed, tables as rows with their headers)."""
    parser = _HTMLText()
    for token in html_tokens(fragment):
        if token[0] == "text":
            parser.handle_data(token[1])
        elif token[0] == "start":
            parser.handle_starttag(token[1], token[2])
        else:
            parser.handle_endtag(token[1])
    return re.sub(r"\n{3,}", "\n\n", parser.text())


@component
class MarkdownCleaner:
    """
    Cleans markdown written for documentation site generators, so that what is indexed is what a reader sees.

    - Admonitions (`!!! note "Title"` with an indented body) become a paragraph starting `Note (Title):`; content
      tabs (`=== "Tab"`) become a line `Tab:` before their dedented content; API-reference directives (`::: module.name`
      with their option lines) are removed.
    - Template tags: comments (`{% comment %}...{% endcomment %}`) are removed with their content; control tags
      (`{% include %}`, `{% raw %}`, `{% if %}`...) are removed; other tags (shortcodes) leave their quoted
      arguments; `{{ name }}` leaves the bare name and any other expression is removed.
    - HTML is turned into text: tables become list items that keep their column headers (`- Header: cell; ...`),
      list items stay items, links and images leave their text, scripts, styles and frames are removed.
    - Markdown pipe tables become the same list items with their headers.

    Front matter, fenced code blocks and inline code are left exactly as written. Documents that are not markdown
    pass through unchanged. An opener without its end (`{{`, `{%`, `<!--`, backticks) stays as written: each kind of end
    is looked for past the last place it was found missing, so cleaning takes time linear in the text.

    Usage:
    ```python
    from haystack import Document
    from gatehouse.components.preprocessors.markdown_cleaner import MarkdownCleaner

    doc = Document(content='!!! note\\n    Keep it short.\\n', meta={"mime_type": "text/markdown"})
    MarkdownCleaner().run(documents=[doc])["documents"][0].content   # "Note: Keep it short.\\n"
    ```
    """

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """
        Clean the markdown documents.

        :param documents: Converted documents; those whose `mime_type` (or `source`) is markdown are cleaned.
        :returns: `documents`, the same documents with cleaned content.
        """
        cleaned = []
        for document in documents:
            meta = document.meta or {}
            source = str(meta.get("source") or meta.get("file_path") or "")
            if meta.get("mime_type") in MARKDOWN_TYPES or source.lower().endswith((".md", ".markdown")):
                document = Document(id=document.id, content=clean_markdown(document.content or ""), meta=meta)
            cleaned.append(document)
        return {"documents": cleaned}


def clean_markdown(text: str) -> str:
    """The cleaned markdown of one document (see `MarkdownCleaner`)."""
    front = FRONT_MATTER.match(text)
    head, body = (text[: front.end()], text[front.end():]) if front else ("", text)
    body = _without_comment_blocks(body)
    return head + "".join(_clean_prose(part) if kind == "prose" else part for kind, part in _split_code(body))


def _split_code(text: str) -> list[tuple[str, str]]:
    """The text as alternating ("prose", text) and ("code", fenced block) parts, after dialect blocks are unfolded."""
    lines = _unfold(text.splitlines())
    parts: list[tuple[str, list[str]]] = []
    fence = None
    for line in lines:
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            parts.append(("code", [line]))
            continue
        if fence is not None:
            parts[-1][1].append(line)
            if match and match.group(1) == fence:
                fence = None
            continue
        if not parts or parts[-1][0] != "prose":
            parts.append(("prose", []))
        parts[-1][1].append(line)
    return [(kind, "\n".join(block) + "\n") for kind, block in parts]


def _unfold(lines: list[str], depth: int = 0) -> list[str]:
    """
    Admonitions, tabs and directives replaced by plain paragraphs (their indented bodies dedented); below
    `MAX_NESTING` levels the lines are left as they are.
    """
    if depth >= MAX_NESTING:
        return lines
    out: list[str] = []
    position = 0
    while position < len(lines):
        line = lines[position]
        admonition, tab = _ADMONITION.match(line), _TAB.match(line)
        if _DIRECTIVE.match(line):
            position += 1
            while position < len(lines) and (not lines[position].strip() or lines[position][:1].isspace()) and \
                    not _DIRECTIVE.match(lines[position]):
                if not lines[position].strip() and position + 1 < len(lines) and not lines[position + 1][:1].isspace():
                    break
                position += 1
            continue
        if admonition or tab:
            match = admonition or tab
            indent = len(match.group("indent"))
            body, position = _indented_body(lines, position + 1, indent)
            body = _unfold(textwrap.dedent("\n".join(body)).splitlines(), depth + 1)
            if admonition:
                kind = admonition.group("kind").replace("-", " ").capitalize()
                title = admonition.group("title")
                label = f"{kind} ({title}):" if title and title.casefold() != kind.casefold() else f"{kind}:"
                first = next((i for i, text in enumerate(body) if text.strip()), None)
                if first is not None and not _FENCE.match(body[first]):
                    body[first] = f"{label} {body[first].strip()}"
                else:
                    body = [label, ""] + body
            else:
                body = [f"{tab.group('title')}:", ""] + body
            out.extend(" " * indent + text if text.strip() else "" for text in body)
            out.append("")
            continue
        out.append(line)
        position += 1
    return out


def _indented_body(lines: list[str], start: int, indent: int) -> tuple[list[str], int]:
    """The lines indented deeper than `indent` from `start` (blank lines inside included), and the next position."""
    body: list[str] = []
    position = start
    while position < len(lines):
        line = lines[position]
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
        position += 1
    while body and not body[-1].strip():
        body.pop()
    return body, position


def _clean_prose(text: str) -> str:
    """Template tags, HTML and pipe tables of text outside code blocks, inline code kept as written."""
    kept: list[str] = []
    text = _protect_code(text, kept)
    text = _template_tags(text)
    text = _expressions(text)
    if _HTML_TAG.search(text) or _has_html_comment(text):
        text = html_to_text(text)
    else:
        text = unescape(text)
    text = _pipe_tables(text)
    return re.sub("\ue000(\\d+)\ue001", lambda m: kept[int(m.group(1))], text)


def _without_comment_blocks(text: str) -> str:
    """`{% comment %}...{% endcomment %}` blocks removed; an opener without an end after it, and all after it, stay."""
    pieces, copied = [], 0
    for opener in _COMMENT_OPEN.finditer(text):
        if opener.start() < copied:
            continue
        closer = _COMMENT_CLOSE.search(text, opener.end())
        if closer is None:
            break  # no later opener has an end either
        pieces.append(text[copied:opener.start()])
        copied = closer.end()
    return "".join(pieces) + text[copied:]


def _template_tags(text: str) -> str:
    """Each `{% name args %}` replaced as `_liquid` says; an opener without a `%}` after it, and all after it, stay."""
    return _delimited(text, _LIQUID_OPEN, "%}", lambda opener, inner: _liquid(opener["name"], inner))


def _expressions(text: str) -> str:
    """
    Each `{{ expression }}` replaced by its name when it is a bare name (`{{ version }}` -> `version`), else removed;
    an opener without a `}}` after it, and all after it, stay.
    """

    def name(_opener: re.Match, inner: str) -> str:
        expression = inner.rstrip()
        return expression if re.fullmatch(r"[\w.-]+", expression) else ""

    return _delimited(text, _EXPRESSION_OPEN, "}}", name)


def _delimited(text: str, opener_pattern: re.Pattern, closer: str,
               replace: Callable[[re.Match, str], str]) -> str:
    """
    Each span from an `opener_pattern` match to the next `closer` replaced by `replace(opener, inner)` (`inner` without
    a trim mark `-` before the closer), in one pass: an opener inside a replaced span is skipped, and an opener without
    a closer after it ends the scan (none later has one either), so the text is read once.
    """
    pieces, copied = [], 0
    for opener in opener_pattern.finditer(text):
        if opener.start() < copied:
            continue
        close = text.find(closer, opener.end())
        if close < 0:
            break
        end = close - 1 if close > opener.end() and text[close - 1] == "-" else close
        pieces += [text[copied:opener.start()], replace(opener, text[opener.end():end])]
        copied = close + len(closer)
    return "".join(pieces) + text[copied:]


def _protect_code(text: str, kept: list[str]) -> str:
    """
    Inline code replaced by placeholders (`\\ue000<n>\\ue001`, the code appended to `kept`): the spans the pattern
    `(`+)(?:.+?)\\1` (dot-all) finds, without its re-reading of the rest of the text from every run of backticks that
    has no closer. From a run of n backticks, w = min(n, the longest later run): when w > (n-1)/2 the span ends with
    the first w backticks of the first later run at least w long; else, for n >= 3, the span is 2k+1 backticks of the
    run itself (k = (n-1)/2); else (no backticks after the run) there is none.
    """
    runs = [(match.start(), match.end()) for match in _BACKTICKS.finditer(text)]
    longest = [0] * (len(runs) + 1)  # longest[i]: the longest run of runs[i:]
    for index in range(len(runs) - 1, -1, -1):
        longest[index] = max(longest[index + 1], runs[index][1] - runs[index][0])
    pieces, copied, index = [], 0, 0
    while index < len(runs):
        start = max(runs[index][0], copied)  # a run the previous span ended in goes on from there
        length = runs[index][1] - start
        width = min(length, longest[index + 1])
        if width > (length - 1) // 2:
            close = index + 1
            while runs[close][1] - runs[close][0] < width:
                close += 1
            end, index = runs[close][0] + width, close
        elif length >= 3:
            end = start + 2 * ((length - 1) // 2) + 1
        else:
            break  # no backticks after this run
        pieces += [text[copied:start], f"\ue000{len(kept)}\ue001"]
        kept.append(text[start:end])
        copied = end
        if copied >= runs[index][1]:
            index += 1
    return "".join(pieces) + text[copied:]


def _has_html_comment(text: str) -> bool:
    """Whether the text holds `<!--` with a `-->` after it."""
    opener = text.find("<!--")
    return opener >= 0 and text.find("-->", opener + 4) >= 0


def _liquid(name: str, args: str) -> str:
    """What a template tag leaves: nothing for a control tag or an end tag, else its quoted arguments."""
    if name.casefold() in CONTROL_TAGS or name.startswith("end"):
        return ""
    return " ".join(a or b for a, b in _QUOTED.findall(args))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _pipe_tables(text: str) -> str:
    """Markdown pipe tables (a header row, a rule row, body rows) replaced by list items with their headers."""
    lines = text.split("\n")
    out: list[str] = []
    position = 0
    while position < len(lines):
        if position + 1 < len(lines) and _TABLE_ROW.match(lines[position]) and _TABLE_RULE.match(lines[position + 1]):
            header = _cells(lines[position])
            rows = []
            position += 2
            while position < len(lines) and _TABLE_ROW.match(lines[position]):
                rows.append(_cells(lines[position]))
                position += 1
            if out and out[-1].strip():
                out.append("")
            out.extend(table_rows(header, rows))
            out.append("")
            continue
        out.append(lines[position])
        position += 1
    return "\n".join(out)
