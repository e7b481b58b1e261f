"""
The structured citations of a verified answer (`state["citations"]`): one entry per passage the answer cites, in
order of first use. The citation verifier's `citations` settings configure them.

Each entry has the display text "<title> › <section>", the section alone, a snippet of the passage's body, the
quote (the passage's answer units the answer's sentences citing it stand for, each whole with its lead-in, so a
client can show what a marker stands for without the rest of the passage), a URL that names the section
(`url#section_id`; document-level when there is no section; `url_template#section_id`, by default
`kb://<kb>/<source>#<section_id>`, when the passage has no URL or its URL is not a safe link), `chunk_id`, `source`,
`kb` and `confidence` (the best support score of the claims citing it).

Usage:
```python
from haystack import Document
from gatehouse.components.validators.citation_list import CITATION_DEFAULTS, CitationList

passage = Document(content="API keys expire after 90 days.", meta={"title": "API keys", "section": "Expiry",
                   "section_id": "expiry", "kb": "docs", "source": "api-keys.md"})
citations = CitationList(CITATION_DEFAULTS)
citations.build("Keys expire after 90 days. [S1]", {"S1": passage}, [{"ids": ["S1"], "score": 0.9}])
# [{"id": "S1", "text": "API keys › Expiry", "url": "kb://docs/api-keys.md#expiry", "confidence": 0.9, ...}]
```
"""

from typing import Any

from haystack import Document

from gatehouse.components.answer_units import AnswerUnit, passage_units, render, shown_text
from gatehouse.components.guardrails.sanitising import citation_url, plain_text, plain_text_keeping_code
from gatehouse.components.citation_markers import DEFAULT_CITATION_PATTERN, find_markers, rewrite_markers, strip_markers
from gatehouse.components.printable import printable
from gatehouse.components.terms import content_words, overlap
from gatehouse.components.text_units import normalize_space, shortened, split_units, strip_heading_markers

#: The citation verifier's `citations` settings and their defaults: the snippet's length, the separator between
#: title and section in the display text, the URL of a passage without `meta["url"]` (`{kb}` and `{source}` filled
#: in, `#<section_id>` appended when known) and the `{kb}` of a passage without `meta["kb"]`.
CITATION_DEFAULTS: dict[str, Any] = {
    "snippet_chars": 200, "text_separator": " › ", "url_template": "kb://{kb}/{source}", "fallback_kb": "context",
}


class CitationList:
    """Builds the citation entries of an answer (see the module documentation)."""

    def __init__(self, settings: dict[str, Any], citation_pattern: str = DEFAULT_CITATION_PATTERN) -> None:
        """
        :param settings: The `citations` settings (every key of `CITATION_DEFAULTS`).
        :param citation_pattern: Regex of a citation marker whose group 1 holds the ids.
        """
        self.settings = settings
        self.citation_pattern = citation_pattern

    def build(self, answer: str, by_id: dict[str, Document], claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """
        The citations of the passages `answer`'s markers point at, in order of first use.

        :param answer: The verified answer with `[S#]` markers (every id a key of `by_id`).
        :param by_id: The passages by source id.
        :param claims: The answer's claims (`ids`, `score`): a citation's `confidence` is the best score citing it.
        :returns: One citation per passage cited.
        """
        order = list(dict.fromkeys(i for _, _, ids in find_markers(answer, self.citation_pattern) for i in ids))
        statements = [(strip_markers(unit.text, self.citation_pattern),
                       {i for _, _, ids in find_markers(unit.text, self.citation_pattern) for i in ids})
                      for unit in split_units(answer, citation_pattern=self.citation_pattern)]
        citations = []
        for source_id in order:
            passage = by_id[source_id]
            source = (passage.meta or {}).get("source")
            scores = [c["score"] for c in claims if source_id in c["ids"]]
            citations.append(
                {
                    "id": source_id,
                    "text": normalize_space(plain_text(self._display_text(passage, source_id))),
                    "section": self._section(passage),
                    "snippet": self._snippet(plain_text(passage.content or "")),
                    "quote": self._quote([text for text, ids in statements if source_id in ids], passage),
                    "url": citation_url(self.url(passage)) or self._kb_url(passage),
                    "chunk_id": passage.id,
                    "source": source if source is None else plain_text(str(source)),
                    "kb": (passage.meta or {}).get("kb"),
                    "confidence": round(max(scores), 3) if scores else 0.0,
                }
            )
        return citations

    def url(self, passage: Document) -> str:
        """The passage's URL naming its section, before the safety check (`build` falls back to the KB link when
        it is not a safe link)."""
        meta = passage.meta or {}
        section_id = meta.get("section_id")
        anchor = f"#{section_id}" if section_id else ""
        url = meta.get("url")
        if url:
            return str(url) if "#" in str(url) or not anchor else f"{url}{anchor}"
        return self._kb_url(passage)

    def _display_text(self, passage: Document, source_id: str) -> str:
        meta = passage.meta or {}
        title = meta.get("title") or meta.get("source") or source_id
        section = meta.get("section")
        if section and str(section).strip() and str(section).strip() != str(title).strip():
            return f"{title}{self.settings['text_separator']}{section}"
        return str(title)

    @staticmethod
    def _section(passage: Document) -> str | None:
        """The passage's section heading, plain text; None when it has none."""
        section = normalize_space(plain_text(str((passage.meta or {}).get("section") or "")))
        return section or None

    def _quote(self, statements: list[str], passage: Document) -> str:
        """
        The passage's answer units the statements stand for: for each statement, the unit sharing most of its content
        words (the shortest of equals), whole with its lead-in, in the passage's order, plain text with its code
        verbatim (as the answer shows it); the snippet when no unit shares a word with them.
        """
        units = [(unit, content_words(shown_text(unit))) for unit in passage_units(passage, 0)]
        chosen: dict[tuple[int, int, int], AnswerUnit] = {}
        for statement in statements:
            words = content_words(statement)
            scored = [(overlap(words, unit_words), -len(unit.text), unit) for unit, unit_words in units]
            if scored:
                share, _, unit = max(scored, key=lambda entry: entry[:2])
                if share > 0:
                    chosen[unit.key] = unit
        if not chosen:
            return self._snippet(plain_text(passage.content or ""))
        shown: list[str] = []
        lead = None  # the lead of the item units shown last: items of one list share it
        for unit in sorted(chosen.values(), key=lambda u: (u.first, u.last)):
            if unit.kind == "item" and unit.lead and unit.lead == lead:
                shown[-1] += "\n" + "\n".join(unit.items)
                continue
            shown.append(rewrite_markers(render(unit, "S0"), lambda ids: []))
            lead = unit.lead if unit.kind == "item" else None
        return plain_text_keeping_code("\n\n".join(shown)).strip()

    def _snippet(self, content: str) -> str:
        # Headings repeat the citation's display text, so the snippet starts at the passage's body when it has one.
        body = [u.text for u in split_units(content, citation_pattern=self.citation_pattern) if u.kind != "heading"]
        text = normalize_space(" ".join(body) if body else strip_heading_markers(content))
        limit = self.settings["snippet_chars"]
        return text if len(text) <= limit else shortened(text, limit + 1)

    def _kb_url(self, passage: Document) -> str:
        """The passage's link in its knowledge base (`url_template`): where a citation points without a page URL,
        or when the page's URL is not a safe link."""
        meta = passage.meta or {}
        anchor = f"#{meta['section_id']}" if meta.get("section_id") else ""
        kb = meta.get("kb") or self.settings["fallback_kb"]
        source = meta.get("source") or meta.get("doc_id") or passage.id
        return printable(self.settings["url_template"].format(kb=kb, source=source) + anchor)
