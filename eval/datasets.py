"""
Evaluation sets for `gatehouse eval`: the data classes every set is turned into, and one loader per format.

A set is an `EvalSet`: cases (`EvalCase`, one question each, with its gold labels), optionally a corpus of its
own (`CorpusDocument`, ingested into a fresh data directory before asking) and the knowledge-base declarations
the router needs for that corpus. Loaders:

- `load_golden(path)`: Gatehouse's own YAML format (documented in `docs/evaluation.md`); `eval/sets/golden.yml` is
  the golden set for the sample knowledge bases in `kb/`.
- `load_mtrag_un(data_dir)`: IBM MTRAG-UN `reference.jsonl`, four knowledge bases built from the pooled reference
  passages of each collection.
- `load_squad2(path)`: SQuAD 2.0 (`dev-v2.0.json`), the paragraphs as one knowledge base.
- `load_set(name)` / `available_sets()`: the registry, resolving names to loaders and default paths (data under
  `../shared/data` next to the project, or `$GATEHOUSE_EVAL_DATA`); a missing data set raises
  `DatasetNotPresent` with the reason, and `available_sets()` reports it without raising.

Every loader validates its input and raises `EvalSetError` naming the file, the case and the field.

Usage:
```python
from gatehouse.eval.datasets import available_sets, load_set, write_corpus

for info in available_sets():
    print(info.name, info.present, info.reason)
golden = load_set("golden")
squad = load_set("squad2", limit=40)          # whole paragraphs, answerable and unanswerable questions
write_corpus(squad.corpus, "/tmp/squad-kb")   # laid out like kb/: ingest with gatehouse.ingest.sample_groups
```
"""

import hashlib
import json
import math
import os
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from bm25s.stopwords import STOPWORDS_EN_PLUS

from gatehouse.components.intent.intent_rules import DEFAULT_INTENT_PATTERNS, ROUTES
from gatehouse.components.kb_routing.kb_entries import KB_KEYS, KB_NAME
from gatehouse.settings import bundled_dir
from gatehouse.components.state import PUBLIC_TENANT
from gatehouse.components.terms import DEFAULT_STOPWORDS
from gatehouse.eval.metrics import aspect_words, fact_text
from gatehouse.ingest import files_under

#: The intents a gold label may name: those of Gatehouse's intent gate.
INTENTS: tuple[str, ...] = tuple(DEFAULT_INTENT_PATTERNS)
#: Roles allowed in a case's history, as the ask pipeline accepts them.
HISTORY_ROLES = ("user", "assistant", "system")
#: Where the data sets live unless `$GATEHOUSE_EVAL_DATA` says otherwise.
DEFAULT_DATA_ROOT = bundled_dir().parent / "shared" / "data"  # beside a source checkout
#: The golden set for the sample knowledge bases.
GOLDEN_SET = Path(__file__).resolve().parent / "sets" / "golden.yml"
#: File suffix under which corpus documents are written (and cited: `<kb>/<id>.txt`).
CORPUS_SUFFIX = ".txt"

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_WORD = re.compile(r"[^\W\d_]+(?:['-][^\W\d_]+)*")
_URL = re.compile(r"\]\([^)]*\)|\b(?:https?://|www\.)\S+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_STOPWORDS = frozenset(DEFAULT_STOPWORDS) | frozenset(STOPWORDS_EN_PLUS)


class EvalSetError(ValueError):
    """An evaluation set file that cannot be used; the message names the file, the case and the field."""


class DatasetNotPresent(FileNotFoundError):
    """A registered data set whose files are not on this machine; `reason` says what is missing."""

    def __init__(self, name: str, reason: str) -> None:
        """
        :param name: The set's registry name.
        :param reason: What is missing, for the runner's skip message.
        """
        super().__init__(f"evaluation set '{name}' is not present: {reason}")
        self.name = name
        self.reason = reason


@dataclass
class CorpusDocument:
    """
    A document the runner ingests before asking the set's questions.

    It is written as `<id>.txt` into the folder of its knowledge base (`write_corpus`), so Gatehouse cites it with
    `kb` = `self.kb` and `source` = `self.file_name`; gold sources name it as `self.source_key`.
    """

    id: str
    kb: str
    text: str
    title: str = ""
    tenant: str = PUBLIC_TENANT
    url: str | None = None

    @property
    def file_name(self) -> str:
        """The file the document is written to, and the `source` of its citations."""
        return f"{self.id}{CORPUS_SUFFIX}"

    @property
    def source_key(self) -> str:
        """The gold-source key `<kb>/<source>` of this document."""
        return f"{self.kb}/{self.file_name}"

    def file_text(self) -> str:
        """
        The file contents: front matter with the title and URL (which the splitter turns into metadata), then text.

        :returns: The text to write.
        """
        header = {key: value for key, value in (("title", self.title), ("url", self.url)) if value}
        if not header and not self.text.startswith("---"):
            return self.text
        header = header or {"title": self.id}
        front = yaml.safe_dump(header, allow_unicode=True, sort_keys=False, width=10_000)
        return f"---\n{front}---\n{self.text}"


@dataclass
class GoldPart:
    """
    One part of a multi-part question: what it asks about and, when a document answers it, the answer.

    `gold_facts` are short strings (figures, names) that an answer of this part must contain; an unanswerable part
    has neither answer, facts nor sources: the right behaviour is to report it missing.

    ```python
    GoldPart(aspect="Team plan price", gold_answer="$49 per member per month.", gold_facts=["$49"],
             gold_sources=["product/pricing-plans.md"], gold_kb="product")
    ```
    """

    aspect: str
    gold_answer: str | None = None
    gold_facts: list[str] = field(default_factory=list)
    gold_sources: list[str] = field(default_factory=list)
    gold_kb: str | None = None
    answerable: bool = True


@dataclass
class EvalCase:
    """One question with its gold labels (see `docs/evaluation.md` for what each field means)."""

    id: str
    question: str
    history: list[dict] = field(default_factory=list)
    gold_answer: str | None = None
    gold_sources: list[str] = field(default_factory=list)
    gold_contexts: list[str] = field(default_factory=list)
    gold_kb: str | None = None
    gold_intent: str | None = None
    gold_route: str | None = None
    answerable: bool = True
    tenant: str = PUBLIC_TENANT
    tags: list[str] = field(default_factory=list)
    gold_parts: list[GoldPart] = field(default_factory=list)


@dataclass
class EvalSet:
    """
    A loaded evaluation set.

    `version` is the first 12 hex digits of a SHA-256 over the source file(s); `corpus` empty means the set is
    asked against the knowledge bases already ingested (the sample ones in `kb/` for the golden set);
    `knowledge_bases` are router declarations (`name`, `description`, `keywords`, `examples`) for the set's own
    knowledge bases.
    """

    name: str
    version: str
    cases: list[EvalCase]
    corpus: list[CorpusDocument] = field(default_factory=list)
    knowledge_bases: list[dict] = field(default_factory=list)


@dataclass
class SetInfo:
    """A registered set: where its data is expected and whether it is there."""

    name: str
    description: str
    path: Path
    present: bool
    reason: str | None = None


# --- shared helpers -----------------------------------------------------------------------------------------------


def file_version(*paths: str | Path) -> str:
    """
    The version of a set: SHA-256 over the given files (folders: every non-hidden file below, by relative path).

    :param paths: Files or folders.
    :returns: The first 12 hex digits.
    """
    digest = hashlib.sha256()
    for raw in paths:
        path = Path(raw)
        # the files ingestion takes from the path, so the version and the ingested knowledge base agree
        for file in files_under(path):
            name = file.relative_to(path).as_posix() if path.is_dir() else file.name
            digest.update(name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def safe_id(raw: str) -> str:
    """
    A filesystem-safe form of an identifier: unchanged when already safe, otherwise unsafe characters become `_`
    and a short hash of the original keeps distinct identifiers distinct.

    :param raw: Any identifier.
    :returns: Letters, digits, `.`, `_` and `-`, starting with a letter or digit.
    """
    if _SAFE_ID.match(raw):
        return raw
    cleaned = _UNSAFE_CHARS.sub("_", raw).strip("._-") or "doc"
    return f"{cleaned}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


def _stable_rank(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def stratified_slice(items: list[Any], *, limit: int | None, stratum: Callable[[Any], Any],
                     key: Callable[[Any], str]) -> list[Any]:
    """
    A deterministic, stratified sample of `limit` items, in their original order.

    Every stratum gets one item while the budget lasts (largest strata first), the rest is shared in proportion
    to the strata's sizes (largest remainder). Within a stratum items are taken in the order of a hash of their
    key, so the sample is spread over the file rather than its first lines, and is the same on every machine.

    :param items: The items.
    :param limit: How many to keep; None keeps all.
    :param stratum: The stratum of an item (any sortable value).
    :param key: A unique, stable key of an item.
    :returns: The selected items.
    :raises ValueError: If `limit` is below 1.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"'limit' must be at least 1, got {limit}.")
    if limit is None or limit >= len(items):
        return list(items)
    groups: dict[Any, list[Any]] = defaultdict(list)
    for item in items:
        groups[stratum(item)].append(item)
    names = sorted(groups)
    for name in names:
        groups[name].sort(key=lambda item: _stable_rank(key(item)))
    quota = dict.fromkeys(names, 0)
    for name in sorted(names, key=lambda n: (-len(groups[n]), n))[:limit]:
        quota[name] = 1
    remaining = limit - sum(quota.values())
    if remaining > 0:
        spare = {name: len(groups[name]) - quota[name] for name in names}
        total = sum(spare.values())
        exact = {name: remaining * spare[name] / total for name in names}
        for name in names:
            quota[name] += math.floor(exact[name])
        left = limit - sum(quota.values())
        for name in sorted(names, key=lambda n: (-(exact[n] - math.floor(exact[n])), n))[:left]:
            quota[name] += 1
    chosen = {id(item) for name in names for item in groups[name][: quota[name]]}
    return [item for item in items if id(item) in chosen]


def _first_sentence(text: str, *, min_words: int = 6, max_words: int = 30) -> str:
    sentences = _SENTENCE.split(" ".join(_URL.sub("]", text).split()))
    sentence = next((s for s in sentences if len(s.split()) >= min_words), sentences[0])
    words = sentence.split()
    return " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")


def _terms(text: str) -> set[str]:
    words = _WORD.findall(_URL.sub(" ", text).lower())
    return {word for word in words if len(word) > 2 and word not in _STOPWORDS}


def corpus_knowledge_bases(corpus: list[CorpusDocument], descriptions: dict[str, str], *, top_keywords: int = 15,
                           examples: int = 3) -> list[dict[str, Any]]:
    """
    Router declarations for the knowledge bases of a corpus, computed from its documents.

    Keywords are the terms most distinctive of a knowledge base: by `p * log(p / q)`, where `p` and `q` are the
    smoothed shares of its documents and of the other knowledge bases' documents that contain the term (by share
    of documents alone when there is one knowledge base); a term must occur in at least 3 documents of the KB
    (2 when it has fewer than 30) and be more common there than in the others. URLs are ignored.
    Examples are the first sentences (of at least six words) of the documents that contain the most keywords.
    The description is the generic one given for the KB (or a neutral one) followed by its ten strongest keywords.

    :param corpus: The documents.
    :param descriptions: A generic description per knowledge base name.
    :param top_keywords: Keywords per knowledge base.
    :param examples: Example texts per knowledge base.
    :returns: `[{name, description, keywords, examples}]`, one per knowledge base, by name.
    """
    terms_by_kb: dict[str, list[tuple[CorpusDocument, set[str]]]] = defaultdict(list)
    for document in corpus:
        terms_by_kb[document.kb].append((document, _terms(f"{document.title} {document.text}")))
    df = {kb: Counter(term for _, terms in docs for term in terms) for kb, docs in terms_by_kb.items()}
    total_df = sum(df.values(), Counter())
    total_docs = len(corpus)
    declarations = []
    for kb in sorted(terms_by_kb):
        docs = terms_by_kb[kb]
        size, rest_size = len(docs), total_docs - len(docs)
        scores = {}
        min_count = 3 if size >= 30 else 2
        for term, count in df[kb].items():
            if count < min_count:
                continue
            share = (count + 0.5) / (size + 1)
            if rest_size:
                rest_share = (total_df[term] - count + 0.5) / (rest_size + 1)
                if share > rest_share:
                    scores[term] = share * math.log(share / rest_share)
            else:
                scores[term] = share
        keywords = [term for term, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:top_keywords]]
        keyword_set = set(keywords)
        best = sorted(docs, key=lambda dt: (-len(dt[1] & keyword_set), dt[0].id))[:examples]
        generic = descriptions.get(kb) or f"Reference documents of the '{kb}' collection."
        topics = f" Frequent terms: {', '.join(keywords[:10])}." if keywords else ""
        declarations.append({
            "name": kb,
            "description": generic + topics,
            "keywords": keywords,
            "examples": [_first_sentence(doc.text) for doc, _ in best],
        })
    return declarations


def write_corpus(corpus: list[CorpusDocument], root: str | Path) -> list[Path]:
    """
    Write a set's corpus as files laid out like `kb/`: `<root>/<kb>/<id>.txt` for the public tenant and
    `<root>/tenants/<tenant>/<kb>/<id>.txt` for others, so `gatehouse.ingest.sample_groups(root)` ingests it.

    :param corpus: The documents.
    :param root: The folder to write into (created when missing).
    :returns: The files written.
    :raises EvalSetError: If two documents would share a file, or a public KB is named `tenants`.
    """
    root = Path(root)
    written: dict[Path, str] = {}
    for document in corpus:
        if not _SAFE_ID.match(document.id):
            raise EvalSetError(f"corpus document {document.id!r}: field 'id': not filesystem-safe.")
        if document.tenant == PUBLIC_TENANT:
            if document.kb == "tenants":
                raise EvalSetError(f"corpus document {document.id!r}: field 'kb': 'tenants' is reserved.")
            folder = root / document.kb
        else:
            folder = root / "tenants" / document.tenant / document.kb
        path = folder / document.file_name
        if path in written:
            raise EvalSetError(f"corpus document {document.id!r}: written twice to {path}.")
        written[path] = document.file_text()
    for path, text in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(written)


# --- golden: Gatehouse's YAML format ----------------------------------------------------------------------------

_SET_KEYS = {"name", "description", "kb_root", "cases", "corpus", "knowledge_bases"}
_CASE_KEYS = {"id", "question", "history", "gold_answer", "gold_sources", "gold_contexts", "gold_kb", "gold_intent",
              "gold_route", "answerable", "tenant", "tags", "gold_parts"}
_PART_KEYS = {"aspect", "gold_answer", "gold_facts", "gold_sources", "gold_kb", "answerable"}
_CORPUS_KEYS = {"id", "kb", "text", "path", "title", "tenant", "url"}


class _Where:
    """Builds error messages that name the file, the case and the field."""

    def __init__(self, path: Path, case: str | None = None) -> None:
        self.path = path
        self.case = case

    def error(self, field_name: str | None, problem: str) -> EvalSetError:
        where = str(self.path)
        if self.case is not None:
            where += f": {self.case}"
        if field_name is not None:
            where += f": field '{field_name}'"
        return EvalSetError(f"{where}: {problem}")


def _string(value: Any, where: _Where, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise where.error(name, f"must be a non-empty string, got {value!r}.")
    return value.strip()


def _string_list(value: Any, where: _Where, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise where.error(name, f"must be a list of non-empty strings, got {value!r}.")
    return [v.strip() for v in value]


def _choice(value: Any, where: _Where, name: str, choices: Iterable[str]) -> str | None:
    choices = tuple(choices)
    if value is None:
        return None
    if value not in choices:
        raise where.error(name, f"must be one of {', '.join(choices)}, got {value!r}.")
    return value


def _kb_name(value: Any, where: _Where, name: str) -> str:
    if not isinstance(value, str) or not KB_NAME.match(value):
        raise where.error(name, f"must be a knowledge base name (letters, digits, '_', '-', '.'), got {value!r}.")
    return value


def _history(value: Any, where: _Where) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error("history", f"must be a list of {{role, content}} turns, got {value!r}.")
    turns = []
    for number, turn in enumerate(value, start=1):
        if not isinstance(turn, dict) or set(turn) != {"role", "content"}:
            raise where.error("history", f"turn {number} must have exactly the keys role and content, got {turn!r}.")
        role = _choice(turn["role"], where, f"history[{number}].role", HISTORY_ROLES)
        content = _string(turn["content"], where, f"history[{number}].content")
        turns.append({"role": role, "content": content})
    return turns


def _source_path(kb_root: Path, tenant: str, source_key: str) -> Path:
    kb, _, source = source_key.partition("/")
    base = kb_root if tenant == PUBLIC_TENANT else kb_root / "tenants" / tenant
    return base / kb / source


def _source_list(value: Any, where: _Where, name: str) -> list[str]:
    sources = _string_list(value, where, name)
    for source in sources:
        kb, _, file_name = source.partition("/")
        if not KB_NAME.match(kb) or not file_name:
            raise where.error(name, f"{source!r} is not of the form '<kb>/<source>'.")
    return sources


def _source_text(source: str, where: _Where, name: str, tenant: str, kb_root: Path | None,
                 corpus: dict[str, str] | None) -> str | None:
    """The text of a gold source, after checking it exists; None when the set gives neither kb_root nor corpus."""
    if corpus is not None:
        if source not in corpus:
            raise where.error(name, f"{source!r} is not a document of the set's corpus.")
        return corpus[source]
    if kb_root is None:
        return None
    file = _source_path(kb_root, tenant, source)
    if not file.is_file():
        raise where.error(name, f"{source!r} does not exist at {file}.")
    return file.read_text(encoding="utf-8")


def _gold_parts(value: Any, where: _Where, tenant: str, kb_root: Path | None,
                corpus: dict[str, str] | None) -> list[GoldPart]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) < 2:
        raise where.error("gold_parts", f"must be a list of at least two parts, got {value!r}.")
    parts: list[GoldPart] = []
    for number, raw in enumerate(value, start=1):
        name = f"gold_parts[{number}]"
        if not isinstance(raw, dict):
            raise where.error(name, f"must be a mapping, got {type(raw).__name__}.")
        unknown = sorted(set(raw) - _PART_KEYS)
        if unknown:
            raise where.error(f"{name}.{unknown[0]}", f"unknown key; allowed: {', '.join(sorted(_PART_KEYS))}.")
        aspect = _string(raw.get("aspect"), where, f"{name}.aspect")
        if not aspect_words(aspect):
            raise where.error(f"{name}.aspect", f"{aspect!r} has no content word to recognise a reported part by.")
        if aspect.lower() in {part.aspect.lower() for part in parts}:
            raise where.error(f"{name}.aspect", f"{aspect!r} is the aspect of an earlier part.")
        answerable = raw.get("answerable", True)
        if not isinstance(answerable, bool):
            raise where.error(f"{name}.answerable", f"must be true or false, got {answerable!r}.")
        part = GoldPart(
            aspect=aspect,
            gold_answer=_string(raw.get("gold_answer"), where, f"{name}.gold_answer", optional=True),
            gold_facts=_string_list(raw.get("gold_facts"), where, f"{name}.gold_facts"),
            gold_sources=_source_list(raw.get("gold_sources"), where, f"{name}.gold_sources"),
            gold_kb=None if raw.get("gold_kb") is None else _kb_name(raw["gold_kb"], where, f"{name}.gold_kb"),
            answerable=answerable,
        )
        for key in ("gold_answer", "gold_facts", "gold_sources"):
            if part.answerable and not getattr(part, key):
                raise where.error(f"{name}.{key}", "is required for an answerable part.")
            if not part.answerable and getattr(part, key):
                raise where.error(f"{name}.{key}", "must be empty for an unanswerable part (no document answers it).")
        kbs = {source.split("/", 1)[0] for source in part.gold_sources}
        if part.gold_kb is None and len(kbs) == 1:
            part.gold_kb = next(iter(kbs))
        if part.gold_kb is not None and kbs and part.gold_kb not in kbs:
            raise where.error(f"{name}.gold_kb", f"{part.gold_kb!r} is not the knowledge base of any gold source.")
        texts = [_source_text(source, where, f"{name}.gold_sources", tenant, kb_root, corpus)
                 for source in part.gold_sources]
        if texts and all(text is not None for text in texts):
            searched = [fact_text(text) for text in texts]
            for fact in part.gold_facts:
                if not any(fact_text(fact) in text for text in searched):
                    raise where.error(f"{name}.gold_facts",
                                      f"{fact!r} does not occur in {', '.join(part.gold_sources)}.")
        parts.append(part)
    if not any(part.answerable for part in parts):
        raise where.error("gold_parts", "needs an answerable part (when no part is answered, the case is "
                                        "unanswerable: drop gold_parts and set answerable: false).")
    return parts


def _golden_case(raw: Any, number: int, path: Path, kb_root: Path | None, corpus: dict[str, str] | None) -> EvalCase:
    label = f"case #{number}"
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        label = f"case '{raw['id']}' (#{number})"
    where = _Where(path, label)
    if not isinstance(raw, dict):
        raise where.error(None, f"must be a mapping, got {type(raw).__name__}.")
    unknown = sorted(set(raw) - _CASE_KEYS)
    if unknown:
        raise where.error(unknown[0], f"unknown field; allowed: {', '.join(sorted(_CASE_KEYS))}.")
    case_id = _string(raw.get("id"), where, "id")
    answerable = raw.get("answerable", True)
    if not isinstance(answerable, bool):
        raise where.error("answerable", f"must be true or false, got {answerable!r}.")
    tenant = raw.get("tenant", PUBLIC_TENANT)
    if not isinstance(tenant, str) or not KB_NAME.match(tenant):
        raise where.error("tenant", f"must be a tenant name (letters, digits, '_', '-', '.'), got {tenant!r}.")
    sources = _source_list(raw.get("gold_sources"), where, "gold_sources")
    gold_answer = _string(raw.get("gold_answer"), where, "gold_answer", optional=True)
    gold_kb = None if raw.get("gold_kb") is None else _kb_name(raw.get("gold_kb"), where, "gold_kb")
    parts = _gold_parts(raw.get("gold_parts"), where, tenant, kb_root, corpus)
    if parts:
        union = list(dict.fromkeys(source for part in parts for source in part.gold_sources))
        if sources and set(sources) != set(union):
            raise where.error("gold_sources", f"must be the union of the parts' gold sources {union} (or omitted).")
        sources = sources or union
        gold_answer = gold_answer or " ".join(part.gold_answer for part in parts if part.gold_answer)
        part_kbs = {part.gold_kb for part in parts}
        if gold_kb is not None and part_kbs - {gold_kb, None}:
            raise where.error("gold_kb", f"{gold_kb!r} is not the knowledge base of every part "
                                         f"({', '.join(sorted(kb for kb in part_kbs if kb))}): omit it.")
        if gold_kb is None and len(part_kbs) == 1 and None not in part_kbs:
            gold_kb = next(iter(part_kbs))
    case = EvalCase(
        id=case_id,
        question=_string(raw.get("question"), where, "question"),
        history=_history(raw.get("history"), where),
        gold_answer=gold_answer,
        gold_sources=sources,
        gold_contexts=_string_list(raw.get("gold_contexts"), where, "gold_contexts"),
        gold_kb=gold_kb,
        gold_intent=_choice(raw.get("gold_intent"), where, "gold_intent", INTENTS),
        gold_route=_choice(raw.get("gold_route"), where, "gold_route", ROUTES),
        answerable=answerable,
        tenant=tenant,
        tags=_string_list(raw.get("tags"), where, "tags"),
        gold_parts=parts,
    )
    if case.gold_parts and case.gold_route in ("direct", "refuse"):
        raise where.error("gold_parts", f"must be empty when gold_route is {case.gold_route} (nothing is retrieved).")
    if case.gold_parts and not case.answerable:
        raise where.error("answerable", "must be true with gold_parts (the answerable parts are to be answered).")
    if case.gold_route in ("direct", "refuse") and (case.gold_sources or case.gold_kb):
        field_name = "gold_sources" if case.gold_sources else "gold_kb"
        raise where.error(field_name, f"must be empty when gold_route is {case.gold_route} (nothing is retrieved).")
    if case.gold_route == "refuse" and case.answerable:
        raise where.error("answerable", "must be false when gold_route is refuse.")
    if case.gold_route == "direct" and not case.answerable:
        raise where.error("answerable", "must be true when gold_route is direct (answered without retrieval).")
    if not case.answerable and case.gold_answer is not None:
        raise where.error("gold_answer", "must be empty for an unanswerable case (the right answer is to abstain).")
    if case.gold_kb and case.gold_sources and case.gold_kb not in {s.split("/", 1)[0] for s in case.gold_sources}:
        raise where.error("gold_kb", f"{case.gold_kb!r} is not the knowledge base of any gold source.")
    for source in case.gold_sources:
        _source_text(source, where, "gold_sources", tenant, kb_root, corpus)
    return case


def _golden_corpus(raw: Any, path: Path) -> list[CorpusDocument]:
    where = _Where(path)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise where.error("corpus", f"must be a list of documents, got {type(raw).__name__}.")
    documents = []
    for number, item in enumerate(raw, start=1):
        doc_where = _Where(path, f"corpus document #{number}")
        if not isinstance(item, dict):
            raise doc_where.error(None, f"must be a mapping, got {type(item).__name__}.")
        unknown = sorted(set(item) - _CORPUS_KEYS)
        if unknown:
            raise doc_where.error(unknown[0], f"unknown field; allowed: {', '.join(sorted(_CORPUS_KEYS))}.")
        doc_id = _string(item.get("id"), doc_where, "id")
        if not _SAFE_ID.match(doc_id):
            raise doc_where.error("id", f"must be letters, digits, '.', '_' or '-' (it names a file), got {doc_id!r}.")
        if ("text" in item) == ("path" in item):
            raise doc_where.error("text", "give exactly one of 'text' or 'path'.")
        if "path" in item:
            file = path.parent / _string(item["path"], doc_where, "path")
            if not file.is_file():
                raise doc_where.error("path", f"file {file} does not exist.")
            text = file.read_text(encoding="utf-8")
        else:
            text = _string(item["text"], doc_where, "text")
        tenant = item.get("tenant", PUBLIC_TENANT)
        documents.append(CorpusDocument(
            id=doc_id,
            kb=_kb_name(item.get("kb"), doc_where, "kb"),
            text=text,
            title=_string(item.get("title"), doc_where, "title", optional=True) or "",
            tenant=_kb_name(tenant, doc_where, "tenant"),
            url=_string(item.get("url"), doc_where, "url", optional=True),
        ))
    return documents


def _golden_knowledge_bases(raw: Any, path: Path) -> list[dict]:
    where = _Where(path)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise where.error("knowledge_bases", f"must be a list of mappings, got {type(raw).__name__}.")
    for number, kb in enumerate(raw, start=1):
        name = f"knowledge_bases[{number}]"
        if not isinstance(kb, dict):
            raise where.error(name, f"must be a mapping, got {type(kb).__name__}.")
        unknown = sorted(set(kb) - KB_KEYS)
        if unknown:
            raise where.error(f"{name}.{unknown[0]}", f"unknown key; allowed: {', '.join(sorted(KB_KEYS))}.")
        _kb_name(kb.get("name"), where, f"{name}.name")
        _string(kb.get("description"), where, f"{name}.description")
    return [dict(kb) for kb in raw]


def load_golden(path: str | Path, *, limit: int | None = None) -> EvalSet:
    """
    Load a set in Gatehouse's YAML format (see `docs/evaluation.md`).

    With `kb_root` in the file, every gold source must exist there (`<kb_root>/<kb>/<source>`, or
    `<kb_root>/tenants/<tenant>/<kb>/<source>` for a tenant's case) and the version covers those files too, so a
    changed knowledge base changes the set's version. With a `corpus`, gold sources must name its documents.

    :param path: The YAML file.
    :param limit: Keep a deterministic slice of this many cases, stratified by each case's first tag.
    :returns: The set.
    :raises EvalSetError: If the file is unreadable or a case is malformed (the message names file, case, field).
    """
    path = Path(path)
    where = _Where(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise where.error(None, f"cannot be read: {error}.") from error
    except yaml.YAMLError as error:
        raise where.error(None, f"is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise where.error(None, f"must be a mapping with a 'cases' list, got {type(data).__name__}.")
    unknown = sorted(set(data) - _SET_KEYS)
    if unknown:
        raise where.error(unknown[0], f"unknown field; allowed: {', '.join(sorted(_SET_KEYS))}.")
    name = _string(data.get("name", path.stem), where, "name")
    kb_root = None
    if data.get("kb_root") is not None:
        kb_root = (path.parent / _string(data["kb_root"], where, "kb_root")).resolve()
        if not kb_root.is_dir():
            raise where.error("kb_root", f"folder {kb_root} does not exist.")
    corpus = _golden_corpus(data.get("corpus"), path)
    corpus_texts = {doc.source_key: doc.text for doc in corpus} if corpus else None
    raw_cases = data.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise where.error("cases", "must be a non-empty list of cases.")
    cases: list[EvalCase] = []
    seen: set[str] = set()
    for number, raw in enumerate(raw_cases, start=1):
        case = _golden_case(raw, number, path, kb_root, corpus_texts)
        if case.id in seen:
            raise _Where(path, f"case '{case.id}' (#{number})").error("id", "is used by an earlier case.")
        seen.add(case.id)
        cases.append(case)
    version = file_version(path, *([kb_root] if kb_root is not None else []))
    if corpus:
        texts = "\0".join(f"{doc.tenant}/{doc.source_key}\0{doc.file_text()}" for doc in corpus)
        version = hashlib.sha256(f"{version}\0{texts}".encode()).hexdigest()[:12]
    cases = stratified_slice(cases, limit=limit, stratum=lambda c: c.tags[0] if c.tags else "", key=lambda c: c.id)
    return EvalSet(
        name=name,
        version=version,
        cases=cases,
        corpus=corpus,
        knowledge_bases=_golden_knowledge_bases(data.get("knowledge_bases"), path),
    )


# --- MTRAG-UN ---------------------------------------------------------------------------------------------------

#: Generic descriptions of the MTRAG-UN collections; the loader appends keywords computed from the passages.
MTRAG_DESCRIPTIONS = {
    "clapnq": "Encyclopedia articles from Wikipedia on general knowledge: history, science, geography, people, "
              "sports, music, film and culture.",
    "fiqa": "Personal finance and investing answers from a community forum: taxes, loans, credit, banking, stocks, "
            "funds, retirement savings and budgeting.",
    "govt": "Pages of US federal and state government and public-service websites: agencies, benefits, health care, "
            "veterans, courts, laws, public programmes and science.",
    "ibmcloud": "IBM Cloud product documentation: cloud services, accounts and access, command-line tools, APIs, "
                "Kubernetes, networking, storage, security and troubleshooting.",
}
#: answerability label -> (answerable, keep the target as gold answer). See `docs/evaluation.md`.
MTRAG_ANSWERABILITY = {
    "ANSWERABLE": (True, True),
    "PARTIAL": (True, True),
    "UNANSWERABLE": (False, False),
    "UNDERSPECIFIED": (False, False),
}
#: MTRAG-UN question types with a direct counterpart among Gatehouse's intents (used when a task has just one).
MTRAG_INTENTS = {
    "Factoid": "factual",
    "Explanation": "explanation",
    "Comparative": "comparison",
    "How-To": "procedural",
    "Opinion": "opinion",
    "Summarization": "aggregation",
}
_MTRAG_ROLES = {"user": "user", "agent": "assistant"}


def _tag(prefix: str, value: str) -> str:
    return f"{prefix}:{re.sub(r'[^a-z0-9]+', '-', value.lower()).strip('-')}"


def _mtrag_case(task: Any, line: int, path: Path) -> tuple[EvalCase, list[CorpusDocument], str]:
    label = f"line {line}"
    if isinstance(task, dict) and isinstance(task.get("task_id"), str):
        label = f"task '{task['task_id']}' (line {line})"
    where = _Where(path, label)
    if not isinstance(task, dict):
        raise where.error(None, f"must be a JSON object, got {type(task).__name__}.")
    task_id = _string(task.get("task_id"), where, "task_id")
    collection = _kb_name(task.get("Collection"), where, "Collection")
    labels = task.get("answerability")
    if not isinstance(labels, list) or len(labels) != 1 or labels[0] not in MTRAG_ANSWERABILITY:
        raise where.error(
            "answerability", f"must be one of {', '.join(MTRAG_ANSWERABILITY)} (one label), got {labels!r}."
        )
    answerability = labels[0]
    turns = task.get("input")
    if not isinstance(turns, list) or not turns:
        raise where.error("input", "must be a non-empty list of turns.")
    history = []
    for number, turn in enumerate(turns, start=1):
        if not isinstance(turn, dict) or turn.get("speaker") not in _MTRAG_ROLES:
            raise where.error(f"input[{number}].speaker", f"must be user or agent, got {turn!r:.80}.")
        history.append({"role": _MTRAG_ROLES[turn["speaker"]],
                        "content": _string(turn.get("text"), where, f"input[{number}].text")})
    last = history.pop()
    if last["role"] != "user":
        raise where.error("input", "the last turn must be the user's question.")
    targets = task.get("targets")
    if not isinstance(targets, list) or not targets or not isinstance(targets[0], dict):
        raise where.error("targets", "must be a non-empty list of {speaker, text} turns.")
    target = _string(targets[0].get("text"), where, "targets[1].text")
    contexts = task.get("contexts")
    if not isinstance(contexts, list):
        raise where.error("contexts", "must be a list of passages.")
    documents = []
    for number, context in enumerate(contexts, start=1):
        if not isinstance(context, dict):
            raise where.error(f"contexts[{number}]", "must be a {document_id, text} object.")
        document_id = _string(context.get("document_id"), where, f"contexts[{number}].document_id")
        documents.append(CorpusDocument(
            id=safe_id(document_id),
            kb=collection,
            text=_string(context.get("text"), where, f"contexts[{number}].text"),
            title=_string(context.get("title"), where, f"contexts[{number}].title", optional=True) or "",
        ))
    answerable, keep_target = MTRAG_ANSWERABILITY[answerability]
    question_types = [t for t in task.get("Question Type") or [] if isinstance(t, str)]
    multi_turn = [t for t in task.get("Multi-Turn") or [] if isinstance(t, str) and t != "N/A"]
    tags = ["follow-up" if history else "single-turn", _tag("answerability", answerability)]
    tags += [_tag("multi-turn", t) for t in multi_turn] + [_tag("question-type", t) for t in question_types]
    case = EvalCase(
        id=task_id,
        question=last["content"],
        history=history,
        gold_answer=target if keep_target else None,
        gold_sources=list(dict.fromkeys(doc.source_key for doc in documents)),
        gold_contexts=[doc.text for doc in documents],
        gold_kb=collection,
        gold_intent=MTRAG_INTENTS.get(question_types[0]) if len(question_types) == 1 else None,
        gold_route="retrieve",
        answerable=answerable,
        tags=tags,
    )
    return case, documents, answerability


def load_mtrag_un(data_dir: str | Path, limit: int | None = None) -> EvalSet:
    """
    Load MTRAG-UN (`reference.jsonl`): one case per task, four knowledge bases (one per `Collection`).

    Each task's last user turn is the question and the earlier turns its history (`agent` -> `assistant`); the
    gold answer is the target, the gold contexts and sources its reference passages, the gold KB its collection.
    Answerability: ANSWERABLE and PARTIAL are answerable (PARTIAL: the passages answer part of the question and
    the target says what is missing); UNANSWERABLE and UNDERSPECIFIED are not (the target declines or asks the
    user to clarify, which Gatehouse can only approach by abstaining), and carry no gold answer. Every case keeps
    its label as an `answerability:<label>` tag so reports can show the groups apart.

    The corpus is the pooled reference passages of each collection (deduplicated by `document_id`; ids made
    filesystem-safe with `safe_id`). With `limit`, it holds only the passages of the selected cases, so that a
    quick run ingests a few dozen passages instead of 1,152 (its retrieval is easier than the full set's).
    Knowledge-base declarations for the router are computed from the corpus.

    :param data_dir: The `mtrag_un` folder (or the `reference.jsonl` file itself).
    :param limit: Keep a deterministic slice of this many cases, stratified by collection and answerability.
    :returns: The set.
    :raises EvalSetError: If the file is missing or a task is malformed.
    """
    data_dir = Path(data_dir)
    path = data_dir / "reference.jsonl" if data_dir.is_dir() else data_dir
    if not path.is_file():
        raise EvalSetError(f"{path}: file not found (expected MTRAG-UN's reference.jsonl).")
    rows = []
    pooled: dict[str, dict[str, CorpusDocument]] = defaultdict(dict)
    seen: set[str] = set()
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                task = json.loads(line)
            except json.JSONDecodeError as error:
                raise _Where(path, f"line {number}").error(None, f"is not valid JSON: {error}.") from error
            case, documents, answerability = _mtrag_case(task, number, path)
            if case.id in seen:
                raise _Where(path, f"task '{case.id}' (line {number})").error("task_id", "is used by an earlier task.")
            seen.add(case.id)
            for document in documents:
                known = pooled[document.kb].get(document.id)
                if known is not None and known.text != document.text:
                    raise _Where(path, f"task '{case.id}' (line {number})").error(
                        "contexts", f"document {document.id!r} has a different text in an earlier task."
                    )
                pooled[document.kb].setdefault(document.id, document)
            rows.append((case, answerability, documents))
    selected = stratified_slice(rows, limit=limit, stratum=lambda row: (row[0].gold_kb, row[1]),
                                key=lambda row: row[0].id)
    if len(selected) == len(rows):
        keep = {(kb, doc_id) for kb, documents in pooled.items() for doc_id in documents}
    else:
        keep = {(doc.kb, doc.id) for _, _, documents in selected for doc in documents}
    corpus = [pooled[kb][doc_id] for kb, doc_id in sorted(keep)]
    return EvalSet(
        name="mtrag_un",
        version=file_version(path),
        cases=[case for case, _, _ in selected],
        corpus=corpus,
        knowledge_bases=corpus_knowledge_bases(corpus, MTRAG_DESCRIPTIONS),
    )


# --- SQuAD 2.0 --------------------------------------------------------------------------------------------------

SQUAD_KB = "squad"


def _squad_paragraphs(data: Any, path: Path) -> list[tuple[CorpusDocument, list[EvalCase]]]:
    where = _Where(path)
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list) or not articles:
        raise where.error("data", "must be a non-empty list of articles.")
    paragraphs = []
    seen: set[str] = set()
    for a_number, article in enumerate(articles, start=1):
        a_where = _Where(path, f"article #{a_number}")
        if not isinstance(article, dict):
            raise a_where.error(None, "must be an object with title and paragraphs.")
        title = _string(article.get("title"), a_where, "title")
        if not isinstance(article.get("paragraphs"), list):
            raise a_where.error("paragraphs", "must be a list.")
        for p_number, paragraph in enumerate(article["paragraphs"]):
            p_where = _Where(path, f"article '{title}' paragraph #{p_number + 1}")
            if not isinstance(paragraph, dict):
                raise p_where.error(None, "must be an object with context and qas.")
            document = CorpusDocument(
                id=safe_id(f"{title}-{p_number:03d}"),
                kb=SQUAD_KB,
                text=_string(paragraph.get("context"), p_where, "context"),
                title=title.replace("_", " "),
            )
            if not isinstance(paragraph.get("qas"), list):
                raise p_where.error("qas", "must be a list of questions.")
            cases = []
            for question in paragraph["qas"]:
                q_id = question.get("id") if isinstance(question, dict) else None
                q_where = _Where(path, f"question '{q_id}' (article '{title}')" if q_id else p_where.case)
                if not isinstance(question, dict):
                    raise q_where.error(None, "must be an object.")
                q_id = _string(q_id, q_where, "id")
                if q_id in seen:
                    raise q_where.error("id", "is used by an earlier question.")
                seen.add(q_id)
                impossible = question.get("is_impossible")
                if not isinstance(impossible, bool):
                    raise q_where.error("is_impossible", f"must be true or false, got {impossible!r}.")
                answers = question.get("answers")
                if not isinstance(answers, list) or (not impossible and not answers):
                    raise q_where.error("answers", "must be a list, non-empty for an answerable question.")
                gold = None if impossible else _string(
                    answers[0].get("text") if isinstance(answers[0], dict) else None, q_where, "answers[1].text"
                )
                cases.append(EvalCase(
                    id=q_id,
                    question=_string(question.get("question"), q_where, "question"),
                    gold_answer=gold,
                    gold_sources=[document.source_key],
                    gold_contexts=[document.text],
                    gold_kb=SQUAD_KB,
                    gold_route="retrieve",
                    answerable=not impossible,
                    tags=["single-turn", _tag("answerability", "unanswerable" if impossible else "answerable"),
                          _tag("article", title)],
                ))
            paragraphs.append((document, cases))
    return paragraphs


def _rounds(lists: list[list[Any]]) -> list[list[Any]]:
    """
    Rounds over several lists: the first items of each, then the second items of each, ...

    :param lists: The lists.
    :returns: One list per round, skipping lists that have run out.
    """
    longest = max((len(items) for items in lists), default=0)
    return [[items[i] for items in lists if i < len(items)] for i in range(longest)]


def _interleaved(cases: list[EvalCase]) -> list[EvalCase]:
    answerable = [case for case in cases if case.answerable]
    unanswerable = [case for case in cases if not case.answerable]
    mixed = []
    for pair in zip(answerable, unanswerable):
        mixed.extend(pair)
    shorter = min(len(answerable), len(unanswerable))
    return mixed + answerable[shorter:] + unanswerable[shorter:]


SQUAD_ARTICLE_SPLITS = ("all", "tune", "report")


def squad_articles(titles: list[str], split: str) -> list[str]:
    """
    The articles of a split, in file order: `tune` takes the 1st, 3rd, 5th... article, `report` the 2nd, 4th...,
    `all` every one. Answerability is tuned on `tune` and reported on `report`.

    :param titles: The article titles in file order.
    :param split: `all`, `tune` or `report`.
    :returns: The titles of the split.
    :raises ValueError: On an unknown split.
    """
    if split not in SQUAD_ARTICLE_SPLITS:
        raise ValueError(f"Unknown SQuAD article split '{split}'; use one of {', '.join(SQUAD_ARTICLE_SPLITS)}.")
    if split == "all":
        return list(titles)
    return [title for i, title in enumerate(titles) if i % 2 == (0 if split == "tune" else 1)]


def squad_sample(paragraphs: list[tuple[CorpusDocument, list[EvalCase]]], size: int, *, articles: str = "all",
                 seed: int = 0) -> list[EvalCase]:
    """
    A seeded sample of `size` questions, half unanswerable, spread evenly over the articles of a split.

    Within each article the answerable and the unanswerable questions are shuffled (seeded); questions are then taken
    in turns, one article after another, alternating answerable and unanswerable, until `size` is reached (an article
    that runs out of one kind is skipped for that kind).

    :param paragraphs: The paragraphs and their questions (`_squad_paragraphs`).
    :param size: How many questions.
    :param articles: The article split (`squad_articles`).
    :param seed: The shuffle seed.
    :returns: The sampled cases, in sampling order.
    """
    if size < 2:
        raise ValueError(f"The SQuAD sample needs at least 2 questions, got {size}.")
    by_article: dict[str, list[EvalCase]] = defaultdict(list)
    for document, cases in paragraphs:
        by_article[document.title].extend(cases)
    chosen_titles = squad_articles(list(by_article), articles)
    pools: dict[bool, list[list[EvalCase]]] = {True: [], False: []}
    for title in chosen_titles:
        for answerable in (True, False):
            pool = sorted((c for c in by_article[title] if c.answerable == answerable), key=lambda c: c.id)
            random.Random(f"{seed}:{title}:{answerable}").shuffle(pool)
            pools[answerable].append(pool)
    position = {case.id: i for i, title in enumerate(chosen_titles) for case in by_article[title]}
    picked: list[EvalCase] = []
    quotas = {False: size // 2, True: size - size // 2}
    for answerable, quota in quotas.items():
        turns = [case for round_ in _rounds(pools[answerable]) for case in round_]
        picked.extend(turns[:quota])
    return sorted(picked, key=lambda c: (position[c.id], c.id))


def load_squad2(path: str | Path, limit: int | None = None, *, sample: int | None = None, articles: str = "all",
                seed: int = 0) -> EvalSet:
    """
    Load SQuAD 2.0 (`dev-v2.0.json`): every paragraph is a document of one knowledge base, `squad`; every question
    a case whose gold source and context are its paragraph, gold answer the first answer text, and answerable
    unless `is_impossible`.

    With `limit`, whole paragraphs are taken in turn from each article (the first paragraph of every article, then
    the second, ...) until `limit` questions are reached; the last paragraph's questions alternate answerable and
    unanswerable, so both kinds are present whenever `limit` >= 2. The corpus then holds only the selected
    paragraphs, which keeps a quick run's ingestion small.

    With `sample`, the questions are `squad_sample` of the `articles` split (half unanswerable, evenly over the
    articles, seeded) and the corpus holds every paragraph of every article, so retrieval searches all of them.

    :param path: The JSON file.
    :param limit: At most this many cases.
    :param sample: Sample this many questions instead (overrides `limit`).
    :param articles: With `sample`: `all`, `tune` or `report` articles (`squad_articles`).
    :param seed: With `sample`: the sampling seed.
    :returns: The set.
    :raises EvalSetError: If the file is missing or malformed.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise EvalSetError(f"{path}: cannot be read: {error}.") from error
    except json.JSONDecodeError as error:
        raise EvalSetError(f"{path}: is not valid JSON: {error}.") from error
    paragraphs = _squad_paragraphs(data, path)
    if sample is not None:
        return EvalSet(
            name="squad2",
            version=file_version(path),
            cases=squad_sample(paragraphs, sample, articles=articles, seed=seed),
            corpus=[document for document, _ in paragraphs],
            knowledge_bases=corpus_knowledge_bases(
                [document for document, _ in paragraphs],
                {SQUAD_KB: "Wikipedia paragraphs (SQuAD 2.0) on: "
                           + ", ".join(dict.fromkeys(document.title for document, _ in paragraphs)) + "."},
            ),
        )
    if limit is not None and limit < 1:
        raise ValueError(f"'limit' must be at least 1, got {limit}.")
    if limit is not None and limit < sum(len(cases) for _, cases in paragraphs):
        by_article: dict[str, list[tuple[CorpusDocument, list[EvalCase]]]] = defaultdict(list)
        for document, cases in paragraphs:
            by_article[document.title].append((document, cases))
        order = [item for round_ in _rounds(list(by_article.values())) for item in round_]
        chosen: list[tuple[CorpusDocument, list[EvalCase]]] = []
        count = 0
        for document, cases in order:
            if not cases:
                continue
            room = limit - count
            if room <= 0:
                break
            chosen.append((document, cases if len(cases) <= room else _interleaved(cases)[:room]))
            count += len(chosen[-1][1])
        paragraphs = chosen
    return EvalSet(
        name="squad2",
        version=file_version(path),
        cases=[case for _, cases in paragraphs for case in cases],
        corpus=[document for document, _ in paragraphs],
        knowledge_bases=corpus_knowledge_bases(
            [document for document, _ in paragraphs],
            {SQUAD_KB: "Wikipedia paragraphs (SQuAD 2.0) on: "
                       + ", ".join(dict.fromkeys(document.title for document, _ in paragraphs)) + "."},
        ),
    )


# --- registry ---------------------------------------------------------------------------------------------------


def data_root() -> Path:
    """The folder holding the shared data sets: `$GATEHOUSE_EVAL_DATA`, or `../shared/data` next to the project."""
    configured = os.environ.get("GATEHOUSE_EVAL_DATA")
    return Path(configured).expanduser().resolve() if configured else DEFAULT_DATA_ROOT


@dataclass(frozen=True)
class _Registered:
    description: str
    default_path: Callable[[], Path]
    required: str
    loader: Callable[..., EvalSet]


_REGISTRY: dict[str, _Registered] = {
    "golden": _Registered(
        "Golden set for the sample knowledge bases in kb/ (written for Gatehouse)",
        lambda: GOLDEN_SET, "", load_golden,
    ),
    "mtrag_un": _Registered(
        "IBM MTRAG-UN multi-turn RAG tasks, four knowledge bases from the pooled reference passages",
        lambda: data_root() / "mtrag_un", "reference.jsonl", load_mtrag_un,
    ),
    "squad2": _Registered(
        "SQuAD 2.0 dev (CS224N half): paragraphs as one knowledge base, answerable and unanswerable questions",
        lambda: data_root() / "squad2_cs224n" / "dev-v2.0.json", "", load_squad2,
    ),
}


def _missing(registered: _Registered, path: Path) -> str | None:
    target = path / registered.required if registered.required and (path.is_dir() or not path.suffix) else path
    if not target.is_file():
        return f"{target} not found (set GATEHOUSE_EVAL_DATA to the folder holding the data sets)"
    return None


def available_sets() -> list[SetInfo]:
    """
    Every registered set with its default path and whether its data is present (never raises for missing data).

    :returns: One entry per set, in registry order.
    """
    infos = []
    for name, registered in _REGISTRY.items():
        path = registered.default_path()
        reason = _missing(registered, path)
        infos.append(SetInfo(name=name, description=registered.description, path=path, present=reason is None,
                             reason=reason))
    return infos


def load_set(name: str, *, path: str | Path | None = None, limit: int | None = None, **options: Any) -> EvalSet:
    """
    Load a registered set by name.

    :param name: `golden`, `mtrag_un` or `squad2`.
    :param path: Another file or folder than the default one.
    :param limit: A deterministic slice of at most this many cases (see each loader).
    :param options: Loader-specific options (squad2: `sample`, `articles`, `seed`).
    :returns: The set.
    :raises ValueError: If the name is unknown.
    :raises DatasetNotPresent: If the set's data is not on this machine.
    :raises EvalSetError: If the data is malformed.
    """
    if name not in _REGISTRY:
        raise ValueError(f"Unknown evaluation set '{name}'. Known sets: {', '.join(_REGISTRY)}.")
    registered = _REGISTRY[name]
    target = Path(path) if path is not None else registered.default_path()
    reason = _missing(registered, target)
    if reason is not None:
        raise DatasetNotPresent(name, reason)
    return registered.loader(target, limit=limit, **options)
