"""
Shared building blocks for the tiered classifiers of Gatehouse (plain Python, not a component).

The intent gate (`gatehouse.components.intent.intent_gate.IntentGate`) and the knowledge-base router
(`gatehouse.components.kb_routing.kb_router.KBRouter`) both classify a query in tiers, cheapest first:

1. regular expressions (`PatternMatcher`),
2. keyword lists (`KeywordMatcher`),
3. embedding similarity to labelled examples (`ExampleIndex`),
4. an optional LLM (`gatehouse.components.chat.ask_chat_generator`, then `parse_labels`, `parse_json_object`).

Each tier either decides with enough confidence (`decide`) or defers to the next. This module holds the logic
once so the two components only differ in how they configure and combine the tiers.

Keyword syntax: keywords are matched case-insensitively on word boundaries. Spaces, hyphens and underscores
inside a keyword match any of them or nothing (`"api key"` matches `API key`, `api-key`, `apikey`), the last
word may take a plural `s`/`es` (`"invoice"` matches `invoices`), and a trailing `*` matches any word ending
(`"deploy*"` matches `deploy`, `deployment`, `deploying`).
"""

import json
import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np

from gatehouse.components.embedders.embedding import EmbeddingBackend


def normalize_text(text: str) -> str:
    """
    Normalise text for matching: Unicode NFKC, typographic quotes folded, whitespace collapsed.

    :param text: The text to normalise.
    :returns: The normalised text (case is kept; matchers ignore it).
    """
    text = unicodedata.normalize("NFKC", text or "")
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"\s+", " ", text).strip()


def keyword_regex(keyword: str) -> re.Pattern[str]:
    """
    Compile one keyword into a case-insensitive regular expression (see the module docstring for the syntax).

    :param keyword: The keyword or phrase.
    :returns: The compiled pattern.
    :raises ValueError: If the keyword is empty.
    """
    text = normalize_text(keyword).lower()
    wildcard = text.endswith("*")
    text = text.rstrip("*").strip()
    tokens = [token for token in re.split(r"[\s_\-]+", text) if token]
    if not tokens:
        raise ValueError(f"Empty keyword {keyword!r}.")
    body = r"[\s_\-]*".join(re.escape(token) for token in tokens)
    suffix = r"\w*" if wildcard else r"(?:s|es)?"
    # Word boundaries that also work for keywords starting or ending with a non-word character (`c++`, `.env`).
    return re.compile(rf"(?<!\w){body}{suffix}(?!\w)", re.IGNORECASE)


class KeywordMatcher:
    """Keyword lists per label; reports which keywords of each label occur in a text."""

    def __init__(self, keywords: dict[str, list[str]], *, owner: str = "keywords") -> None:
        """
        Compile the keyword lists.

        :param keywords: Keywords per label.
        :param owner: Name of the init parameter, used in error messages.
        :raises ValueError: If the lists are malformed.
        """
        if not isinstance(keywords, dict):
            raise ValueError(
                f"'{owner}' must be a mapping of label to a list of keywords, got {type(keywords).__name__}."
            )
        self.compiled: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
        for label, words in keywords.items():
            if isinstance(words, str) or not isinstance(words, (list, tuple)):
                raise ValueError(f"'{owner}[{label}]' must be a list of strings, got {type(words).__name__}.")
            compiled = []
            for word in words:
                if not isinstance(word, str) or not word.strip().rstrip("*").strip():
                    raise ValueError(f"'{owner}[{label}]' holds an empty or non-string keyword: {word!r}.")
                compiled.append((word, keyword_regex(word)))
            self.compiled[str(label)] = compiled

    def hits(self, text: str) -> dict[str, list[str]]:
        """
        The keywords of each label that occur in `text`.

        :param text: The text to search.
        :returns: Matched keywords per label (every label present, possibly with an empty list).
        """
        normalized = normalize_text(text)
        return {
            label: [word for word, pattern in patterns if pattern.search(normalized)]
            for label, patterns in self.compiled.items()
        }


    def spans(self, text: str, label: str) -> list[tuple[int, int]]:
        """
        Where the keywords of one label occur in the normalised text (`normalize_text(text)`).

        :param text: The text to search.
        :param label: The label whose keywords are searched.
        :returns: `(start, end)` of every occurrence.
        """
        normalized = normalize_text(text)
        return [match.span() for _, pattern in self.compiled.get(label, []) for match in pattern.finditer(normalized)]


class PatternMatcher:
    """Regular expressions per label, tried in the order of the mapping."""

    def __init__(self, patterns: dict[str, list[str]], *, owner: str = "patterns") -> None:
        """
        Compile the patterns (case-insensitive).

        :param patterns: Regular expressions per label.
        :param owner: Name of the init parameter, used in error messages.
        :raises ValueError: If the mapping is malformed or a pattern does not compile.
        """
        if not isinstance(patterns, dict):
            raise ValueError(f"'{owner}' must be a mapping of label to a list of regular expressions.")
        self.compiled: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
        for label, items in patterns.items():
            if isinstance(items, str) or not isinstance(items, (list, tuple)):
                raise ValueError(
                    f"'{owner}[{label}]' must be a list of regular expressions, got {type(items).__name__}."
                )
            self.compiled[str(label)] = [(item, compile_pattern(item, f"{owner}[{label}]")) for item in items]

    def matches(self, text: str) -> dict[str, list[str]]:
        """
        The patterns of each label that match `text`.

        :param text: The text to search.
        :returns: Matching patterns (their source text) per label.
        """
        normalized = normalize_text(text)
        return {
            label: [source for source, pattern in patterns if pattern.search(normalized)]
            for label, patterns in self.compiled.items()
        }

    def spans(self, text: str, label: str) -> list[tuple[int, int]]:
        """
        Where the patterns of one label match the normalised text (`normalize_text(text)`).

        :param text: The text to search.
        :param label: The label whose patterns are searched.
        :returns: `(start, end)` of every match.
        """
        normalized = normalize_text(text)
        return [match.span() for _, pattern in self.compiled.get(label, []) for match in pattern.finditer(normalized)]

    def first(self, text: str) -> tuple[str, str] | None:
        """
        The first label (in mapping order) with a matching pattern.

        :param text: The text to search.
        :returns: `(label, pattern source)` or None when nothing matches.
        """
        normalized = normalize_text(text)
        for label, patterns in self.compiled.items():
            for source, pattern in patterns:
                if pattern.search(normalized):
                    return label, source
        return None


def compile_pattern(source: str, owner: str) -> re.Pattern[str]:
    """
    Compile one case-insensitive regular expression with an error message naming where it came from.

    :param source: The pattern text.
    :param owner: Where the pattern was declared, for the error message.
    :returns: The compiled pattern.
    :raises ValueError: If the pattern is not a string or does not compile.
    """
    if not isinstance(source, str) or not source:
        raise ValueError(f"'{owner}' holds an empty or non-string pattern: {source!r}.")
    try:
        return re.compile(source, re.IGNORECASE)
    except re.error as error:
        raise ValueError(f"'{owner}' holds an invalid regular expression {source!r}: {error}.") from error


class ExampleIndex:
    """
    Labelled example texts embedded once; scores a query by its similarity to each label's examples.

    The examples are embedded lazily on first use (or in `warm_up()`), once per instance, never per query.
    A label's score is the mean of the `top_k` highest cosine similarities between the query and its examples.
    """

    def __init__(
        self,
        examples: dict[str, list[str]],
        *,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
        top_k: int = 1,
        owner: str = "examples",
    ) -> None:
        """
        Validate the examples; nothing is loaded yet.

        :param examples: Example texts per label (labels with no examples are ignored).
        :param embedding_model: Model for `EmbeddingBackend.get`; None uses the configured default.
        :param cache_dir: Cache directory for `EmbeddingBackend.get`; `"off"` disables the cache.
        :param top_k: How many best-matching examples of a label are averaged into its score.
        :param owner: Name of the init parameter, used in error messages.
        :raises ValueError: If the examples are malformed or `top_k` is below 1.
        """
        if not isinstance(examples, dict):
            raise ValueError(f"'{owner}' must be a mapping of label to a list of example texts.")
        if int(top_k) < 1:
            raise ValueError(f"top_k for '{owner}' must be at least 1, got {top_k}.")
        self.texts: list[str] = []
        self.labels: list[str] = []
        for label, items in examples.items():
            if isinstance(items, str) or not isinstance(items, (list, tuple)):
                raise ValueError(f"'{owner}[{label}]' must be a list of strings, got {type(items).__name__}.")
            for item in items:
                if not isinstance(item, str) or not item.strip():
                    raise ValueError(f"'{owner}[{label}]' holds an empty or non-string example: {item!r}.")
                self.texts.append(normalize_text(item))
                self.labels.append(str(label))
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.top_k = int(top_k)
        self._backend: EmbeddingBackend | None = None
        self._matrix: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def empty(self) -> bool:
        """Whether there are no examples at all (the tier is then skipped)."""
        return not self.texts

    @property
    def backend(self) -> EmbeddingBackend:
        """The shared embedding backend (loaded on first access)."""
        if self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.cache_dir)
        return self._backend

    def warm_up(self) -> None:
        """Load the model and embed the examples (idempotent)."""
        if self._matrix is not None or self.empty:
            return
        with self._lock:
            if self._matrix is None:
                self._matrix = self.backend.embed(self.texts)

    def embed_query(self, text: str) -> np.ndarray:
        """
        Embed one query.

        :param text: The query.
        :returns: Its L2-normalised vector.
        """
        return self.backend.embed([normalize_text(text) or " "])[0]

    def scores(self, query_vector: np.ndarray) -> dict[str, float]:
        """
        Score each label by similarity of the query to its examples.

        :param query_vector: The query's L2-normalised vector (from `embed_query`).
        :returns: Score per label, in the order labels were declared.
        """
        self.warm_up()
        if self._matrix is None:
            return {}
        similarities = self._matrix @ query_vector
        by_label: dict[str, list[float]] = {}
        for label, similarity in zip(self.labels, similarities):
            by_label.setdefault(label, []).append(float(similarity))
        return {
            label: float(np.mean(sorted(values, reverse=True)[: self.top_k])) for label, values in by_label.items()
        }


@dataclass(frozen=True)
class Decision:
    """The outcome of one tier: the best label, its score, the runner-up's score and whether it is confident."""

    label: str | None
    score: float
    second: float
    confident: bool


def decide(scores: dict[str, float], *, threshold: float, margin: float) -> Decision:
    """
    Pick the best label when its score reaches `threshold` and beats the runner-up by at least `margin`.

    :param scores: Score per label.
    :param threshold: Minimum score of the best label.
    :param margin: Minimum lead of the best label over the second.
    :returns: The decision (`confident` False means the tier defers).
    """
    if not scores:
        return Decision(label=None, score=0.0, second=0.0, confident=False)
    ranked = sorted(scores.items(), key=lambda item: item[1], reverse=True)
    label, best = ranked[0]
    second = ranked[1][1] if len(ranked) > 1 else 0.0
    confident = best >= threshold and (best - second) >= margin
    return Decision(label=label, score=float(best), second=float(second), confident=bool(confident))


def fill_prompt(template: str, **values: str) -> str:
    """
    Replace `{name}` placeholders in a prompt template (other braces, e.g. JSON examples, are left alone).

    :param template: The prompt template.
    :param values: Placeholder values.
    :returns: The filled prompt.
    """
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def parse_json_object(text: str) -> dict[str, Any] | None:
    """
    Extract the first JSON object from an LLM reply (tolerates code fences and prose around it).

    :param text: The reply.
    :returns: The parsed object, or None when there is none.
    """
    for match in re.finditer(r"\{[^{}]*\}", text or ""):
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_labels(text: str, labels: list[str]) -> list[str]:
    """
    The known labels that a free-text reply names, in order of first appearance.

    :param text: The reply.
    :param labels: The allowed labels.
    :returns: The labels found (possibly empty).
    """
    found: list[tuple[int, str]] = []
    for label in labels:
        match = re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text or "", re.IGNORECASE)
        if match:
            found.append((match.start(), label))
    return [label for _, label in sorted(found)]
