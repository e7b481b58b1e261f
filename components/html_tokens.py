"""
HTML cut into tokens in one left-to-right pass, for the markdown cleaner: start tags (with their text, and their
attributes when asked), end tags and text (character references decoded); comments, declarations and processing
instructions are dropped, and the content of `script` and `style` is raw text up to their end tag.

Tokens are what Python's `html.parser` gives for the same HTML, but that parser reads the rest of the input again from
every construct that is never closed (`<!--`, `<?`, `</x`, `<a "` without their end), so a fragment of thousands of
them took time quadratic in its length. Here each kind of end is searched for past the last place it was found
missing, and a start tag's quoted attribute values are followed only until one is found unclosed (then a tag ends at
its first `>`), so the pass is linear. A construct left open is text up to the next `>` (else the next `<`), as
`html.parser` makes it; a `<![name[` section of an unknown name is dropped up to its `>` (the parser raised an error).

Usage:
```python
from gatehouse.components.html_tokens import html_tokens

list(html_tokens('<p class="x">A &amp; B</p><!-- never closed'))
# [("start", "p", '<p class="x">', False), ("text", "A & B"), ("end", "p"), ("text", "<!-- never closed")]
```
"""

import re
from collections.abc import Iterator
from html import unescape

RAW_TEXT_ELEMENTS = ("script", "style")  # their content is text up to their end tag, never markup
_TAG_NAME = re.compile(r"[a-zA-Z][^\t\n\r\f />\x00]*")
# the rest of a start tag up to its `>`: a quoted value (after `=`) may hold `>`; possessive, so never re-read
_TAG_REST = re.compile(r"""(?:[^>=]|=\s*"[^"]*"|=\s*'[^']*'|=(?!\s*["']))*+>""")
_ATTRIBUTE = re.compile(r"""([^\s/>=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]*)))?""")
_END_TAG = re.compile(r"</\s*([a-zA-Z][-.a-zA-Z0-9:_]*)\s*>")
_COMMENT_END = re.compile(r"--\s*>")
_SECTION_NAME = re.compile(r"[a-zA-Z][-_.a-zA-Z0-9]*")
_SECTION_ENDS = {name: re.compile(r"]\s*]\s*>") for name in ("temp", "cdata", "ignore", "include", "rcdata")} | {
    name: re.compile(r"]\s*>") for name in ("if", "else", "endif")}

Token = tuple  # ("text", text) | ("start", name, tag_text, self_closing) | ("end", name)


class _Ends:
    """The ends of constructs in one text, each kind searched for past where it was last found missing."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.missing: dict[str, int] = {}  # a kind of end -> no such end starts at or after this position
        self.last_gt = text.rfind(">")

    def gt(self, start: int) -> int:
        """The position of the first `>` at or after `start`, or -1."""
        return self.text.find(">", start) if start <= self.last_gt else -1

    def search(self, pattern: re.Pattern[str], start: int) -> re.Match[str] | None:
        """The first match of `pattern` at or after `start`, or None."""
        if start >= self.missing.get(pattern.pattern, len(self.text) + 1):
            return None
        found = pattern.search(self.text, start)
        if found is None:
            self.missing[pattern.pattern] = start
        return found


def _attribute_matches(tag_text: str) -> Iterator[re.Match[str]]:
    name = _TAG_NAME.match(tag_text, 1)
    return _ATTRIBUTE.finditer(tag_text, name.end() if name else 1, len(tag_text) - 1)


def attributes(tag_text: str) -> dict[str, str | None]:
    """
    The attributes of a start tag's text (`<img alt="A &amp; B">` -> `{"alt": "A & B"}`): names lower-cased, values
    unquoted and their character references decoded, None for an attribute without a value; the last of a name wins.
    """
    found: dict[str, str | None] = {}
    for match in _attribute_matches(tag_text):
        key, double, single, bare = match.groups()
        value = next((value for value in (double, single, bare) if value is not None), None)
        found[key.lower()] = unescape(value) if value else value
    return found


def _value_ends_with_slash(tag_text: str) -> bool:
    """Whether the `/` of a tag ending `/>` ends an unquoted value (`<a href=x/>`), so the tag is not self-closing."""
    last = None
    for last in _attribute_matches(tag_text):
        pass
    return last is not None and last.group(4) is not None and last.end() == len(tag_text) - 1


def html_tokens(text: str) -> Iterator[Token]:
    """
    The tokens of an HTML fragment, in order.

    :param text: HTML, or text with some HTML in it.
    :returns: `("text", text)`, `("start", name, tag_text, self_closing)` (name lower-cased; a self-closing tag is
        followed by its `("end", name)`) and `("end", name)` tokens.
    """
    ends = _Ends(text)
    quotes_followed = True  # until a start tag's quoted value is found unclosed
    position, length = 0, len(text)
    while position < length:
        bracket = text.find("<", position)
        if bracket < 0:
            yield "text", unescape(text[position:])
            return
        if bracket > position:
            yield "text", unescape(text[position:bracket])
        position = bracket
        if _TAG_NAME.match(text, position + 1):
            tag_end = -1
            if quotes_followed:
                found = _TAG_REST.match(text, position + 1)
                if found:
                    tag_end = found.end()
                else:  # left open (text, below); later tags end at their first `>`
                    quotes_followed = False
            else:
                gt = ends.gt(position + 1)
                tag_end = gt + 1 if gt >= 0 else -1
            if tag_end > 0:
                tag_text = text[position:tag_end]
                name = _TAG_NAME.match(tag_text, 1).group().lower()
                self_closing = tag_text.endswith("/>") and not _value_ends_with_slash(tag_text)
                yield "start", name, tag_text, self_closing
                position = tag_end
                if self_closing:
                    yield "end", name
                elif name in RAW_TEXT_ELEMENTS:
                    closing = ends.search(re.compile(rf"</\s*{name}\s*>", re.IGNORECASE), position)
                    if closing is None:
                        return  # html.parser drops an unclosed script or style with the rest of the text
                    if closing.start() > position:
                        yield "text", text[position:closing.start()]
                    yield "end", name
                    position = closing.end()
                continue
        else:
            consumed = _markup(text, position, ends)
            if consumed is not None:
                end, token = consumed
                if token is not None:
                    yield token
                position = end
                continue
            if position + 1 < length and not text.startswith(("</", "<!", "<?"), position):
                yield "text", "<"
                position += 1
                continue
        # a construct left open: text up to the next `>`, else the next `<`, else this `<` alone
        gt = ends.gt(position + 1)
        following = gt + 1 if gt >= 0 else text.find("<", position + 1)
        following = following if following > 0 else position + 1
        yield "text", unescape(text[position:following])
        position = following


def _markup(text: str, position: int, ends: _Ends) -> tuple[int, Token | None] | None:
    """
    An end tag, comment, declaration or processing instruction at `position`: (where it ends, its token or None when
    it is dropped); None when there is none there or it is left open.
    """
    if text.startswith("</", position):
        gt = ends.gt(position + 1)
        if gt < 0:
            return None
        tag = _END_TAG.match(text, position)
        if tag:
            return tag.end(), ("end", tag.group(1).lower())
        name = _TAG_NAME.match(text, position + 2)
        if name:
            return gt + 1, ("end", name.group().lower())
        return (position + 3 if gt == position + 2 else gt + 1), None
    if text.startswith("<!--", position):
        found = ends.search(_COMMENT_END, position + 4)
        return (found.end(), None) if found else None
    if text.startswith("<![", position):
        name = _SECTION_NAME.match(text, position + 3)
        section_end = _SECTION_ENDS.get(name.group().lower()) if name else None
        if section_end is not None:
            found = ends.search(section_end, position + 3)
            return (found.end(), None) if found else None
        gt = ends.gt(position + 2)
        return (gt + 1, None) if gt >= 0 else None
    if text.startswith(("<?", "<!"), position):
        start = position + 9 if text[position:position + 9].lower() == "<!doctype" else position + 2
        gt = ends.gt(start)
        return (gt + 1, None) if gt >= 0 else None
    return None
