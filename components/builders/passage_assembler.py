"""
The passage assembler: turns the retrieved documents into the labelled passages the generator may use.
"""

import math
import time
from dataclasses import replace
from typing import Any

from haystack import Document, component

from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import FALLBACK_MESSAGE, State, advance
from gatehouse.components.terms import content_words, jaccard, overlap, tokens
from gatehouse.components.text_units import DEFAULT_ABBREVIATIONS, split_units

#: Whether (`enabled`) and how long passages are compressed: only passages above `min_tokens` (estimated) are
#: compressed, to their `max_sentences` sentences or list items scoring best by `embedding_weight` x the query's
#: embedding cosine + `lexical_weight` x the share of the query's content words they hold (not counting `stopwords`;
#: None: the built-in English list); `embedding_model` and `cache_dir` (None: the configured defaults, `"off"`: no
#: cache) embed them.
COMPRESSION: dict[str, Any] = {"enabled": False, "min_tokens": 200, "max_sentences": 6, "embedding_weight": 0.6,
                               "lexical_weight": 0.4, "stopwords": None, "embedding_model": None, "cache_dir": None}
#: Which documents are duplicates: a content with a token Jaccard similarity of at least `threshold` with one already
#: kept, and (when `max_per_section` is set) documents beyond that many per `(doc_id, section_id)`.
DEDUPE: dict[str, Any] = {"threshold": 0.8, "max_per_section": None}


def estimate_tokens(text: str, tokens_per_word: float = 1.3) -> int:
    """
    Estimate the LLM token count of a text as whitespace words times `tokens_per_word`, rounded up.

    :param text: Any text.
    :param tokens_per_word: Average tokens per English word (about 1.3 for BPE tokenisers).
    :returns: The estimated token count.
    """
    return math.ceil(len((text or "").split()) * tokens_per_word)


def _check_settings(top_k: int, max_context_tokens: int, max_per_section: int | None) -> None:
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if max_context_tokens < 1:
        raise ValueError(f"max_context_tokens must be at least 1, got {max_context_tokens}")
    if max_per_section is not None and max_per_section < 1:
        raise ValueError(f"dedupe.max_per_section must be at least 1 or None, got {max_per_section}")


@component
class PassageAssembler(MovedSettings):
    """
    Deduplicates, ranks, budgets and labels retrieved documents as passages `S1..Sn` for the generator.

    Steps, in order:
    1. Rank the documents by `Document.score` (missing scores fall back to `meta["dense_score"]`, then 0; ties keep
       the retrieval order).
    2. Drop duplicates: a second document with the same id, a document whose content has a token Jaccard similarity
       of at least `dedupe.threshold` with one already kept, and (when `dedupe.max_per_section` is set) documents
       beyond that many per `(doc_id, section_id)`.
    3. Keep the best `top_k`.
    4. Optionally compress long passages to the sentences closest to the query (`compression.enabled`).
    5. Enforce the token budget `max_context_tokens`: passages are taken in relevance order while they fit; the
       first that does not fit and every less relevant one are dropped. The budget counts whitespace words times
       `tokens_per_word` (1.3 approximates BPE tokenisers on English prose). If even the best passage alone is
       over budget it is cut at a sentence boundary (word boundary as a last resort) instead, so that a request
       that retrieved something never ends with no context.
    6. Label the survivors `S1..Sn` in relevance order: copies of the documents (same id) with
       `meta["source_id"]` set.

    When the quality gate set `state["fallback"]` (retries exhausted below the floor), or there are no documents,
    the component emits the `fallback` route with the fallback message as the answer, never an answer from nothing.

    Usage example:
    ```python
    from haystack import Document
    from gatehouse.components.builders.passage_assembler import PassageAssembler
    from gatehouse.components.state import new_state

    assembler = PassageAssembler(top_k=3, max_context_tokens=1500)
    state = new_state("How do I rotate an API key?", documents=[
        Document(content="To rotate an API key: ...", score=0.8, meta={"kb": "docs", "section_id": "rotate"}),
    ])
    result = assembler.run(state=state)
    result["passages"]["passages"][0].meta["source_id"]   # "S1"
    ```
    """

    moved_settings = {
        "compress_min_tokens": "compression.min_tokens",
        "compress_max_sentences": "compression.max_sentences",
        "compress_embedding_weight": "compression.embedding_weight",
        "compress_lexical_weight": "compression.lexical_weight",
        "stopwords": "compression.stopwords",
        "embedding_model": "compression.embedding_model",
        "cache_dir": "compression.cache_dir",
        "compress": "compression.enabled",
        "dedupe_threshold": "dedupe.threshold",
        "max_per_section": "dedupe.max_per_section",
    }

    def __init__(
        self,
        *,
        top_k: int = 5,
        max_context_tokens: int = 2000,
        tokens_per_word: float = 1.3,
        dedupe: dict[str, Any] | None = None,
        compression: dict[str, Any] | None = None,
        abbreviations: list[str] | None = None,
        fallback_message: str = FALLBACK_MESSAGE,
    ) -> None:
        """
        :param top_k: Most passages to keep.
        :param max_context_tokens: Token budget of all passages together.
        :param tokens_per_word: Tokens counted per whitespace-separated word for the budget.
        :param dedupe: Which documents are duplicates (`DEDUPE`: keys and defaults).
        :param compression: Whether and how long passages are reduced to their sentences most related to the query,
            in order (`COMPRESSION`: keys and defaults).
        :param abbreviations: Words whose trailing period does not end a sentence; None uses the built-in list.
        :param fallback_message: The answer given on the `fallback` route.
        :raises ValueError: If a number is out of range or a group has an unknown key.
        """
        self.top_k = top_k
        self.max_context_tokens = max_context_tokens
        self.tokens_per_word = tokens_per_word
        self.dedupe = setting_group("dedupe", dedupe, DEDUPE)
        self.compression = setting_group("compression", compression, COMPRESSION)
        self.abbreviations = abbreviations
        self.fallback_message = fallback_message
        _check_settings(top_k, max_context_tokens, self.dedupe["max_per_section"])
        self._backend: Any = None

    def warm_up(self) -> None:
        """Load the embedding model when compression is on."""
        if self.compression["enabled"] and self._backend is None:
            from gatehouse.components.embedders.embedding import EmbeddingBackend

            self._backend = EmbeddingBackend.get(model=self.compression["embedding_model"],
                                                 cache_dir=self.compression["cache_dir"])

    @component.output_types(passages=State, fallback=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Assemble the passages of a request, or route it to the fallback answer.

        :param state: The request state; reads `documents`, `query` and `fallback`.
        :returns:
            Exactly one of:
            - `passages`: the state with `passages` (labelled copies) and `chunks_used` set.
            - `fallback`: the state with the fallback `answer`, `status` "fallback" and no passages.
        """
        started = time.perf_counter()
        if state.get("fallback") is True:
            return {"fallback": self._fallback(state, started, reason="quality_below_floor")}

        documents = [d for d in (state.get("documents") or []) if d.content and d.content.strip()]
        if not documents:
            return {"fallback": self._fallback(state, started, reason="no_documents")}

        ranked = sorted(enumerate(documents), key=lambda pair: (-self._score(pair[1]), pair[0]))
        kept = self._dedupe([doc for _, doc in ranked])[: self.top_k]
        if self.compression["enabled"]:
            kept = self._compress(kept, str(state.get("query") or ""))
        kept = self._budget(kept)
        passages = [
            replace(doc, meta={**doc.meta, "source_id": f"S{i}"}) for i, doc in enumerate(kept, start=1)
        ]
        new_state = advance(state, stage="assemble_context", started=started, steps=["assemble_context"],
                            passages=passages, chunks_used=len(passages))
        return {"passages": new_state}

    def _fallback(self, state: dict[str, Any], started: float, *, reason: str) -> dict[str, Any]:
        return advance(
            state,
            stage="assemble_context",
            started=started,
            steps=["fallback"],
            answer=self.fallback_message,
            status="fallback",
            fallback=True,
            fallback_reason=reason,
            passages=[],
            citations=[],
            chunks_used=0,
        )

    @staticmethod
    def _score(doc: Document) -> float:
        if doc.score is not None:
            return float(doc.score)
        dense = (doc.meta or {}).get("dense_score")
        return float(dense) if dense is not None else 0.0

    def _dedupe(self, ranked: list[Document]) -> list[Document]:
        kept: list[Document] = []
        kept_tokens: list[set[str]] = []
        seen_ids: set[str] = set()
        per_section: dict[tuple[str, str], int] = {}
        for doc in ranked:
            if doc.id in seen_ids:
                continue
            words = set(tokens(doc.content or ""))
            if any(jaccard(words, other) >= self.dedupe["threshold"] for other in kept_tokens):
                continue
            section = self._section_key(doc)
            if self.dedupe["max_per_section"] is not None and section is not None:
                if per_section.get(section, 0) >= self.dedupe["max_per_section"]:
                    continue
                per_section[section] = per_section.get(section, 0) + 1
            seen_ids.add(doc.id)
            kept.append(doc)
            kept_tokens.append(words)
        return kept

    @staticmethod
    def _section_key(doc: Document) -> tuple[str, str] | None:
        meta = doc.meta or {}
        document = meta.get("doc_id") or meta.get("source")
        section = meta.get("section_id") or meta.get("section")
        if document is None or section is None:
            return None
        return (str(document), str(section))

    def _tokens(self, text: str) -> int:
        return estimate_tokens(text, self.tokens_per_word)

    def _budget(self, docs: list[Document]) -> list[Document]:
        selected: list[Document] = []
        used = 0
        for doc in docs:
            cost = self._tokens(doc.content or "")
            if used + cost <= self.max_context_tokens:
                selected.append(doc)
                used += cost
                continue
            if not selected:
                selected.append(self._truncate(doc, self.max_context_tokens))
            break
        return selected

    def _truncate(self, doc: Document, budget: int) -> Document:
        units = split_units(doc.content or "", abbreviations=self._abbreviations())
        kept: list[str] = []
        for unit in units:
            candidate = "\n".join([*kept, unit.text])
            if self._tokens(candidate) > budget:
                break
            kept.append(unit.text)
        if kept:
            content = "\n".join(kept)
        else:
            words = (doc.content or "").split()
            content = " ".join(words[: max(1, int(budget / self.tokens_per_word))])
        return replace(doc, content=content, meta={**doc.meta, "truncated": True})

    def _abbreviations(self) -> Any:
        return DEFAULT_ABBREVIATIONS if self.abbreviations is None else self.abbreviations

    def _compress(self, docs: list[Document], query: str) -> list[Document]:
        settings = self.compression
        long_docs = [d for d in docs if self._tokens(d.content or "") > settings["min_tokens"]]
        if not long_docs or not query.strip():
            return docs
        self.warm_up()
        query_words = content_words(query, settings["stopwords"])
        query_vector = self._backend.embed([query])[0]
        compressed: dict[str, Document] = {}
        for doc in long_docs:
            units = [u for u in split_units(doc.content or "", abbreviations=self._abbreviations())]
            candidates = [i for i, u in enumerate(units) if u.kind in ("sentence", "item")]
            if len(candidates) <= settings["max_sentences"]:
                continue
            vectors = self._backend.embed([units[i].text for i in candidates])
            scores = {
                i: settings["embedding_weight"] * float(vectors[n] @ query_vector)
                + settings["lexical_weight"] * overlap(query_words, content_words(units[i].text, settings["stopwords"]))
                for n, i in enumerate(candidates)
            }
            best = set(sorted(candidates, key=lambda i: -scores[i])[: settings["max_sentences"]])
            keep = [i for i, u in enumerate(units) if i in best or u.kind == "heading"]
            compressed[doc.id] = replace(
                doc, content=self._join(units, keep), meta={**doc.meta, "compressed": True}
            )
        return [compressed.get(d.id, d) for d in docs]

    @staticmethod
    def _join(units: list[Any], keep: list[int]) -> str:
        parts: list[str] = []
        previous = None
        for i in keep:
            unit = units[i]
            if parts:
                same_paragraph = (
                    previous is not None
                    and previous.kind == "sentence"
                    and unit.kind == "sentence"
                    and previous.block == unit.block
                )
                parts.append(" " if same_paragraph else "\n")
            parts.append(unit.text)
            previous = unit
        return "".join(parts)
