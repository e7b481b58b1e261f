"""
Sanitising an answer's markup with nh3 while it stays markdown (`MarkupSanitiser`): code and autolinks kept verbatim,
dangerous elements removed, and link targets whose URL nh3 would not allow dropped.
"""

import html
import re
import unicodedata

import nh3
from markdown_it.helpers import parseLinkDestination, parseLinkTitle

from gatehouse.components.printable import printable

DEFAULT_DANGEROUS_ELEMENTS: list[str] = ["script", "style", "iframe", "object", "embed", "noscript", "template"]

#: Markdown that renders as text or is a link, kept away from the HTML sanitiser (which would read `List<String>` or
#: `<https://example.com>` as tags): fenced code blocks (a ``` or ~~~ fence starting a line, to its closing fence or
#: the end), code spans (a backtick run to the next run of the same length on that line, not after a backslash) and
#: autolinks (`<https://...>`, `<name@example.com>`). Whatever is not recognised here is sanitised as HTML.
MARKDOWN_VERBATIM = re.compile(
    r"^ {0,3}(?P<ticks>`{3,})[^`\n]*(?:\n[\s\S]*?)??(?:\n {0,3}(?P=ticks)`*[ \t]*(?=\n|\Z)|\Z)"
    r"|^ {0,3}(?P<tildes>~{3,})[^\n]*(?:\n[\s\S]*?)??(?:\n {0,3}(?P=tildes)~*[ \t]*(?=\n|\Z)|\Z)"
    r"|(?<![`\\])(?P<run>`+)(?!`).+?(?<!`)(?P=run)(?!`)"
    r"|<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*>"
    r"|<[\w.!#$%&'*+/=?^`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?>",
    re.MULTILINE,
)
#: Where a markdown link target starts: after `](` (inline link or image), after `[label]:` at the start of a line
#: (link reference definition), or an autolink `<scheme:...>`.
_LINK_TARGET = re.compile(
    r"(?P<inline>\]\([ \t]*(?:\n[ \t]*)?)|(?P<definition>^ {0,3}\[[^\]\n]+\]:[ \t]*(?:\n[ \t]*)?)"
    r"|<(?P<autolink>[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>",
    re.MULTILINE,
)
#: Whitespace between a link's URL, its title and its closing parenthesis.
_SPACES = re.compile(r"\s*")
#: Decides whether a URL may be a link target, with nh3's URL schemes (relative URLs pass).
_URL_CHECKER = nh3.Cleaner(tags={"a"}, attributes={"a": {"href"}}, link_rel=None)
#: Rounds of sanitising after which an answer that still changes (markup escaped over and over) is returned escaped.
SANITIZE_ROUNDS = 5


def url_allowed(url: str) -> bool:
    """Whether nh3 keeps `url` (already unescaped) as a link target: an allowed scheme, or a relative URL."""
    return "href" in _URL_CHECKER.clean(f'<a href="{html.escape(url)}"></a>')


def drop_unsafe_links(text: str) -> str:
    """
    Remove markdown link targets whose URL nh3 would not allow in an `href`.

    `[docs](javascript:alert(1) "title")` becomes `[docs]`, a reference definition `[1]: data:...` loses its URL and
    title, and an autolink `<vbscript:...>` is removed. URLs are read as markdown reads them (entities and backslash
    escapes decoded, nested parentheses), so that an obfuscated scheme is still seen.
    """
    kept, last = [], 0
    for match in _LINK_TARGET.finditer(text):
        if match.start() < last:
            continue
        if match.group("autolink") is not None:
            url, start, end = html.unescape(match.group("autolink")), match.start(), match.end()
        else:
            target = parseLinkDestination(text, match.end(), len(text))
            if not target.ok:
                continue
            url, start, end = target.str, match.end(), target.pos
            title = parseLinkTitle(text, _SPACES.match(text, end).end(), len(text))
            if title.ok:
                end = title.pos
            close = _SPACES.match(text, end).end()
            if match.group("inline") is not None and text.startswith(")", close):
                start, end = match.start() + 1, close + 1
        if not url_allowed(url):
            kept.append(text[last:start])
            last = end
    return "".join(kept) + text[last:]


class MarkupSanitiser:
    """
    Sanitises an answer's HTML with nh3 while it stays markdown: its text, `[S1]` markers, code (kept verbatim) and
    links are kept; tags not allowed are stripped (keeping their text), dangerous elements go with their content,
    and markdown links whose URL scheme nh3 does not allow (`javascript:`, `data:`, ...) lose their target.

    Usage:
    ```python
    MarkupSanitiser(allowed_tags=[]).sanitize("<b>Hi</b> [docs](javascript:x) [S1]")   # "Hi [docs] [S1]"
    ```
    """

    def __init__(self, *, allowed_tags: list[str], dangerous_elements: list[str] = DEFAULT_DANGEROUS_ELEMENTS) -> None:
        """
        :param allowed_tags: HTML tags kept, with the attributes and URL schemes nh3 allows for them.
        :param dangerous_elements: HTML elements removed together with their content.
        :raises ValueError: If a tag is both allowed and dangerous.
        """
        allowed = {tag.lower() for tag in allowed_tags}
        dangerous = {tag.lower() for tag in dangerous_elements}
        if allowed & dangerous:
            raise ValueError(f"allowed_tags and dangerous_elements both name {sorted(allowed & dangerous)}: a tag is "
                             "either kept or removed with its content.")
        self._cleaner = nh3.Cleaner(tags=allowed | {"br"}, clean_content_tags=dangerous)
        self._br = "<br>" if "br" in allowed else "\n"

    def sanitize(self, text: str) -> str:
        """
        The text sanitised.

        Sanitising is repeated until it changes nothing, so that markup revealed by one round (an escaped
        `&lt;script&gt;` turned back into text, a link shifted by a removal) is handled by the next; a text that
        still changes after `SANITIZE_ROUNDS` rounds is returned as escaped HTML.
        """
        for _ in range(SANITIZE_ROUNDS):
            cleaned = self._sanitize_once(text)
            if cleaned == text:
                return text
            text = cleaned
        return drop_unsafe_links(self._cleaner.clean(text))

    def _sanitize_once(self, text: str) -> str:
        """One round: nh3 on everything but code and autolinks, then unsafe link targets removed."""
        pieces, last = [], 0
        for match in MARKDOWN_VERBATIM.finditer(text):
            pieces += [self._clean_html(text[last : match.start()]), match.group(0)]
            last = match.end()
        pieces.append(self._clean_html(text[last:]))
        return drop_unsafe_links("".join(pieces))

    def _clean_html(self, text: str) -> str:
        """nh3's sanitised HTML, unescaped (markdown and plain text need `&`, `<` and `>` as they are), with `<br>`
        as a line break unless it is an allowed tag."""
        return html.unescape(self._cleaner.clean(text).replace("<br>", self._br))


#: The URL schemes a citation link may have; a URL without a scheme (relative) is kept too.
CITATION_URL_SCHEMES: frozenset[str] = frozenset({"http", "https", "kb"})
#: A URL's scheme as a browser reads it (letters, then `:`), after entities are decoded.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
#: Markdown images and links in plain text: `![alt](target)` is dropped, `[label](target)` keeps its label. Neither
#: label nor target holds a bracket (the innermost brackets are the link, as markdown reads `[a [b](u)`), so a line of
#: `[[[[...` or `[a](b [a](b ...` is read once, not once per bracket.
_MARKDOWN_TARGET = r"\((?:[^()\[\]\n]|\([^()\[\]\n]*\))*\)"
_MARKDOWN_IMAGE = re.compile(r"!\[[^\[\]\n]*\]" + _MARKDOWN_TARGET)
_MARKDOWN_LINK = re.compile(r"\[([^\[\]\n]*)\]" + _MARKDOWN_TARGET)
_PLAIN_CLEANER = nh3.Cleaner(tags=set(), attributes={}, clean_content_tags={"script", "style"}, link_rel=None)


def citation_url(url: str) -> str | None:
    """
    The URL a citation may carry: http, https, `kb://` or relative; None for anything else (`javascript:`, `data:`,
    a scheme hidden with entities, whitespace or control characters).

    :param url: The URL from a document's front matter or the KB's URL base.
    :returns: The URL, or None when it must be dropped.
    """
    decoded = html.unescape(url).strip()
    if any(char.isspace() or unicodedata.category(char) in ("Cc", "Cf") for char in decoded):
        return None
    scheme = _SCHEME.match(decoded)
    if scheme is None:
        return url.strip()
    return url.strip() if scheme.group(1).casefold() in CITATION_URL_SCHEMES else None


def plain_text(text: str) -> str:
    """
    Text with its markup removed, for fields a client may render (a citation's title and snippet): HTML tags and
    the content of `script`/`style` removed until nothing changes, markdown images dropped, markdown links reduced
    to their label, terminal escapes and control characters removed.

    :param text: Text from a document.
    :returns: Plain text (`<b>Setup</b><script>x()</script>` -> `Setup`).
    """
    for _ in range(SANITIZE_ROUNDS):
        cleaned = html.unescape(_PLAIN_CLEANER.clean(text))
        if cleaned == text:
            break
        text = cleaned
    else:
        text = html.escape(text)
    text = _MARKDOWN_LINK.sub(r"\1", _MARKDOWN_IMAGE.sub("", text))
    return printable(text)


def plain_text_keeping_code(text: str) -> str:
    """
    `plain_text` of a text but its code (fenced blocks, code spans), which stays verbatim, as an answer shows it: a
    citation's quote of `` `tool keys revoke <key-id>` `` holds `<key-id>` as the answer does.

    :param text: Text from a document, markdown.
    :returns: Plain text with its code verbatim (control characters removed).
    """
    pieces, last = [], 0
    for match in MARKDOWN_VERBATIM.finditer(text):
        if not match.group(0).lstrip().startswith(("`", "~")):
            continue  # an autolink: plain text, as everything else
        pieces += [plain_text(text[last : match.start()]), printable(match.group(0))]
        last = match.end()
    pieces.append(plain_text(text[last:]))
    return "".join(pieces)
