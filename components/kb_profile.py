"""
Knowledge-base profiles: what the gates know of a knowledge base, learned from its own documents.

A profile is built from the chunks a KB holds in the lexical store: its vocabulary (stemmed content words with the
number of documents using each), its document titles and section headings, the abbreviations its documents define
("requests per minute (RPM)", "RPM (requests per minute)") and a description derived from its titles. It is stored
beside the index (`<data dir>/profiles/<tenant>/<kb>.json`) with the KB's write counter, and built again whenever the
KB changed since (by ingest, deletion or pruning, in any process).

Usage:
```python
from gatehouse.components.kb_profile import KBProfiles
from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

profiles = KBProfiles(LexicalDocumentStore())
profile = profiles.get("public", "handbook")
profile.description, profile.df("leav"), profile.abbreviations.get("PTO")
profiles.readable("acme")   # the profiles of the KBs the acme tenant may read (its own and the public ones)
```
"""

import json
import os
import re
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gatehouse import settings
from gatehouse.components.state import PUBLIC_TENANT
from gatehouse.components.terms import DEFAULT_STOPWORDS, stem, tokens

PROFILE_VERSION = 1
#: What a KB's own entry (its folder's `kb.yml`, or a `knowledge_bases` item of ask.yml's router) may say.
ENTRY_KEYS = ("name", "description", "keywords", "examples", "patterns", "threshold", "url_base")
MAX_TITLES_IN_DESCRIPTION = 12
_ABBREVIATION = re.compile(r"\(([A-Z][A-Za-z0-9&]{1,9})s?\)")
_ABBREVIATION_FIRST = re.compile(r"\b([A-Z][A-Z0-9&]{1,9})s?\s+\(([^()]{3,80})\)")
_WORDS = re.compile(r"[A-Za-z0-9][\w'-]*")


@dataclass
class KBProfile:
    """What one knowledge base of one tenant is about, from its documents."""

    tenant: str
    kb: str
    generation: int = -1
    documents: int = 0
    chunks: int = 0
    titles: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    vocabulary: dict[str, int] = field(default_factory=dict)  # stem -> documents using it
    abbreviations: dict[str, str] = field(default_factory=dict)  # "RPM" -> "requests per minute"
    description: str = ""
    version: int = PROFILE_VERSION
    entry: dict[str, Any] | None = None  # the KB's own entry (kb.yml), when it has one

    def df(self, term: str) -> int:
        """How many of the KB's documents use a stemmed term."""
        return self.vocabulary.get(term, 0)

    def heading_terms(self) -> set[str]:
        """The stemmed content words of the KB's titles and headings."""
        return {stem(w) for text in (*self.titles, *self.headings) for w in tokens(text)
                if w not in DEFAULT_STOPWORDS}


def check_entry(data: Any, *, where: str) -> dict[str, Any]:
    """
    A KB entry checked: a mapping of `ENTRY_KEYS`, lists of strings where lists belong, a threshold in 0..1.

    :raises ValueError: Naming `where` and what is wrong.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a KB entry must be a mapping, got {type(data).__name__}.")
    unknown = sorted(set(data) - set(ENTRY_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {', '.join(ENTRY_KEYS)}.")
    for key in ("name", "description", "url_base"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f"{where}: '{key}' must be a string.")
    for key in ("keywords", "examples", "patterns"):
        value = data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
            raise ValueError(f"{where}: '{key}' must be a list of non-empty strings.")
    threshold = data.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold <= 1):
        raise ValueError(f"{where}: 'threshold' must be a number between 0 and 1, got {threshold!r}.")
    return dict(data)


def _initials_match(abbreviation: str, words: list[str]) -> bool:
    """Whether the words spell the abbreviation: its first letter starts the first word, the rest follow in order."""
    letters = [c.lower() for c in abbreviation if c.isalnum()]
    text = " ".join(words).lower()
    if not words or not letters or words[0][:1].lower() != letters[0]:
        return False
    position = 1
    for letter in letters[1:]:
        position = text.find(letter, position)
        if position < 0:
            return False
        position += 1
    return True


def find_abbreviations(text: str) -> dict[str, str]:
    """
    The abbreviations a text defines, by the two usual patterns: "long form (ABBR)" and "ABBR (long form)".

    ```python
    find_abbreviations("Limits are in requests per minute (RPM).")   # {"RPM": "requests per minute"}
    ```
    """
    found: dict[str, str] = {}
    for match in _ABBREVIATION.finditer(text):
        abbreviation = match.group(1)
        if sum(c.isupper() for c in abbreviation) < 2:
            continue
        before = _WORDS.findall(text[max(0, match.start() - 120): match.start()])
        for size in range(1, min(len(abbreviation) + 3, len(before)) + 1):
            words = before[-size:]
            if len(words) >= len([c for c in abbreviation if c.isupper()]) - 1 and _initials_match(abbreviation, words):
                found.setdefault(abbreviation, " ".join(words))
                break
    for match in _ABBREVIATION_FIRST.finditer(text):
        abbreviation, long_form = match.group(1), match.group(2).strip()
        words = _WORDS.findall(long_form)
        if abbreviation not in found and len(words) >= 2 and _initials_match(abbreviation, words):
            found[abbreviation] = " ".join(words)
    return found


def build_profile(tenant: str, kb: str, chunks: list[Any], generation: int = -1) -> KBProfile:
    """
    The profile of a KB from its chunks (Haystack Documents with `doc_id`, `title`, `section`, `heading_path`).

    :param tenant: The KB's tenant.
    :param kb: The KB's name.
    :param chunks: Every chunk the KB holds.
    :param generation: The KB's write counter the chunks were read at.
    """
    terms_by_document: dict[str, set[str]] = {}
    titles: dict[str, str] = {}
    chunk_counts: Counter[str] = Counter()
    headings: dict[str, None] = {}
    abbreviations: dict[str, str] = {}
    for chunk in chunks:
        meta = chunk.meta or {}
        document = str(meta.get("doc_id") or meta.get("source") or chunk.id)
        chunk_counts[document] += 1
        title = str(meta.get("title") or "").strip()
        if title:
            titles.setdefault(document, title)
        for heading in [*(meta.get("heading_path") or []), meta.get("section")]:
            if heading and str(heading).strip() != title:
                headings.setdefault(str(heading).strip())
        text = f"{title} {meta.get('section') or ''} {chunk.content or ''}"
        terms_by_document.setdefault(document, set()).update(
            stem(w) for w in tokens(text) if w not in DEFAULT_STOPWORDS and (len(w) > 1 or w.isdigit()))
        for abbreviation, long_form in find_abbreviations(chunk.content or "").items():
            abbreviations.setdefault(abbreviation, long_form)
    vocabulary: Counter[str] = Counter()
    for terms in terms_by_document.values():
        vocabulary.update(terms)
    ordered_titles = [titles[d] for d, _ in chunk_counts.most_common() if d in titles]
    distinct_titles = list(dict.fromkeys(ordered_titles))
    shown = "; ".join(distinct_titles[:MAX_TITLES_IN_DESCRIPTION])
    description = f"{kb}: {len(terms_by_document)} documents" + (f" on {shown}" if shown else "")
    return KBProfile(tenant=tenant, kb=kb, generation=generation, documents=len(terms_by_document),
                     chunks=len(chunks), titles=distinct_titles, headings=list(headings), vocabulary=dict(vocabulary),
                     abbreviations=abbreviations, description=description)


class KBProfiles:
    """
    The profiles of the KBs in a lexical store: read from disk, built again when their KB's write counter moved.

    :param store: The lexical document store (`LexicalDocumentStore`) holding the chunks.
    :param folder: Where profiles are kept; None is `<data dir>/profiles`.
    """

    def __init__(self, store: Any, folder: str | Path | None = None) -> None:
        self.store = store
        self.folder = Path(folder) if folder is not None else None
        self._cache: dict[tuple[str, str], KBProfile] = {}
        self._lock = threading.Lock()

    def _folder(self) -> Path:
        return self.folder if self.folder is not None else settings.data_dir() / "profiles"

    def _path(self, tenant: str, kb: str) -> Path:
        return self._folder() / tenant / f"{kb}.json"

    def generations(self) -> dict[tuple[str, str], int]:
        """The write counter of every (tenant, KB) that holds documents."""
        counts = {key: count for key, count in self.store.metadata_counts(["tenant", "kb"]).items() if count}
        counters = self.store.kb_generations()
        return {(str(tenant), str(kb)): counters.get((tenant, kb), count) for (tenant, kb), count in counts.items()
                if tenant and kb}

    def get(self, tenant: str, kb: str, generation: int | None = None) -> KBProfile:
        """The KB's profile at its current write counter (built and stored when the stored one is older)."""
        if generation is None:
            generation = self.generations().get((tenant, kb), -1)
        cached = self._cache.get((tenant, kb))
        if cached is not None and cached.generation == generation:
            return cached
        with self._lock:
            profile = self._load(tenant, kb, generation) or self._build(tenant, kb, generation)
            profile.entry = self._entry(tenant, kb)
            self._cache[(tenant, kb)] = profile
        return profile

    def set_entry(self, tenant: str, kb: str, entry: dict[str, Any] | None) -> None:
        """Store a KB's own entry (None removes it); profiles read it from their next build on."""
        path = self._path(tenant, kb).with_suffix(".entry.json")
        if entry is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(entry), encoding="utf-8")
        self._cache.pop((tenant, kb), None)

    def _entry(self, tenant: str, kb: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(tenant, kb).with_suffix(".entry.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def readable(self, tenant: str | None, *, include_public: bool = True) -> list[KBProfile]:
        """The profiles of the KBs a tenant may read: its own and (with `include_public`) the public tenant's."""
        tenant = tenant or PUBLIC_TENANT
        allowed = {tenant} | ({PUBLIC_TENANT} if include_public else set())
        return [self.get(owner, kb, generation) for (owner, kb), generation in sorted(self.generations().items())
                if owner in allowed]

    def refresh(self) -> list[KBProfile]:
        """Build and store the profile of every KB whose stored profile is out of date."""
        return [self.get(tenant, kb, generation) for (tenant, kb), generation in sorted(self.generations().items())]

    def _load(self, tenant: str, kb: str, generation: int) -> KBProfile | None:
        try:
            data = json.loads(self._path(tenant, kb).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if data.get("generation") != generation or data.get("version") != PROFILE_VERSION:
            return None
        return KBProfile(**{key: data[key] for key in KBProfile.__dataclass_fields__ if key in data and key != "entry"})

    def _build(self, tenant: str, kb: str, generation: int) -> KBProfile:
        filters = {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": tenant},
                                                     {"field": "meta.kb", "operator": "==", "value": kb}]}
        profile = build_profile(tenant, kb, self.store.filter_documents(filters=filters), generation)
        path = self._path(tenant, kb)
        try:  # a read-only data folder still gets the profile, in memory
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps({**asdict(profile), "entry": None}), encoding="utf-8")
            partial.replace(path)
        except OSError:
            pass
        return profile
