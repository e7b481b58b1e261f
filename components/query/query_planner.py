"""The planner's decomposer: splits a multi-part question into sub-queries, by rules (seed 002's planning step)."""

import re
import time
from typing import Any

from haystack import component, default_from_dict, default_to_dict

from gatehouse.components.chat import ask_chat_generator, chat_generator_from_init_parameters, chat_generator_to_dict
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.text import DEFAULT_STOPWORDS, singular, tokenize

DEFAULT_QUESTION_WORDS = ["what", "which", "how", "where", "when", "who", "why", "is", "are", "can", "could", "do",
                          "does", "did", "should", "will", "would"]
DEFAULT_BACK_REFERENCES = ["it", "its", "this", "that", "they", "them", "their", "these", "those", "one"]
DEFAULT_COMPARISON_PATTERNS = [
    r"^(?:please\s+)?(?:compare|contrast)\s+(?P<entities>.+?)\s+(?:on|in terms of|by|regarding|across|for)\s+"
    r"(?P<aspects>.+)$",
    r"^(?:what\s+(?:is|are)\s+)?(?:the\s+)?differences?\s+between\s+(?P<entities>.+?)\s+(?:in|regarding|for)\s+"
    r"(?P<aspects>.+)$",
    r"^how\s+do\s+(?P<entities>.+?)\s+compare\s+(?:on|in terms of|by|regarding|for)\s+(?P<aspects>.+)$",
]
DEFAULT_ASPECT_PATTERNS = [
    r"^(?:what|tell me)\s+(?:is|are|about)\s+(?P<aspects>.+?)\s+(?:of|for|on|in)\s+(?P<entities>.+)$",
]
#: What makes a question the rules did not split worth asking the LLM tier about: a joining word, a comparison word,
#: a comma, or two question marks.
DEFAULT_LLM_CUES = [r"\band\b", r"\balso\b", r"\bplus\b", r",", r"\?.*\?", r"\b(?:vs\.?|versus|compar\w*|differ\w*)\b"]
#: Few-shot: a 1.5B model given a "reply SINGLE" option replied SINGLE to every question; listing always (one line
#: for one question) lets it split.
DEFAULT_LLM_PROMPT = (
    "List the separate questions in the user's message, one per line. Each question must stand alone (repeat the "
    "subject instead of \"it\"). Use the user's own words. Do not answer.\n\n"
    "Message: How much does the Pro plan cost and can I pay by invoice?\n"
    "1. How much does the Pro plan cost?\n2. Can I pay for the Pro plan by invoice?\n\n"
    "Message: What are the storage limits of the Basic and Premium tiers?\n"
    "1. What are the storage limits of the Basic tier?\n2. What are the storage limits of the Premium tier?\n\n"
    "Message: Why does my upload fail with error 413 and how do I fix the upload?\n"
    "1. Why does my upload fail with error 413 and how do I fix the upload?\n\n"
    "Message: {question}"
)
_LLM_LINE_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)]|q\d+[:.)])\s*", re.IGNORECASE)
_LIST_SEPARATOR = re.compile(r"\s*(?:,\s*(?:and|or)?|\band\b|\bvs\.?|\bversus\b|\bor\b|&)\s*", re.IGNORECASE)
_PREPOSITION = re.compile(r"^(?:on|in|by|for|regarding)\s+", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:the|a|an|our|my|your)\s+", re.IGNORECASE)
_TRAILING = re.compile(r"[\s?!.;:]+$")
_SENTENCES = re.compile(r"(?<=[?!.;])\s+")
_CONNECTIVE = re.compile(r"^(?:and\s+also|and|also|plus)\b,?\s*", re.IGNORECASE)


def _items(text: str) -> list[str]:
    """The items of a spoken list: "price, SSO and support hours" -> ["price", "SSO", "support hours"]."""
    return [_ARTICLE.sub("", _PREPOSITION.sub("", item.strip())) for item in _LIST_SEPARATOR.split(text)
            if item and item.strip()]


def _question_parts(questions: list[str]) -> list[dict[str, Any]]:
    """Plan parts of questions that stand alone: the question as query and label, no entity, aspect or siblings."""
    return [{"query": f"{q[0].upper()}{q[1:]}?", "label": f"{q[0].upper()}{q[1:]}", "entity": None, "aspect": None,
             "siblings": []} for q in questions]


def _share_head(entities: list[str]) -> list[str]:
    """
    "Team", "Enterprise plans" -> "Team plan", "Enterprise plan": a head noun written once after the last item of a
    list belongs to every item that has none.
    """
    *rest, last = entities
    words = last.split()
    if len(words) < 2 or not rest or any(len(item.split()) >= len(words) for item in rest):
        return entities
    head = singular(words[-1])
    return [f"{item} {head}" for item in rest] + [" ".join([*words[:-1], head])]


_SHARED_PREPOSITION = re.compile(r"^(?P<preposition>with|without|using|via|through|on|in|for|from|to)\s+\S", re.IGNORECASE)


def _share_prefix(entities: list[str]) -> list[str]:
    """
    "upgrading the gateway with Helm", "with Docker Compose" -> "upgrading the gateway with Helm", "upgrading the
    gateway with Docker Compose": items that open with the preposition that follows the first item's lead words share
    those words.
    """
    first, *rest = entities
    openings = [_SHARED_PREPOSITION.match(item) for item in rest]
    if not rest or not all(openings):
        return entities
    prepositions = {m["preposition"].casefold() for m in openings if m}
    if len(prepositions) != 1:
        return entities
    lead = re.split(rf"\s+{re.escape(prepositions.pop())}\s+", first, maxsplit=1, flags=re.IGNORECASE)
    if len(lead) != 2 or not lead[0].strip():
        return entities
    return [first] + [f"{lead[0].strip()} {item}" for item in rest]


@component
class QueryPlanner:
    """
    Decides whether a question has several parts and, if so, plans one sub-query per part. Without a model:

    - **comparison** ("Compare the Team and Enterprise plans on price, SSO and support hours", "differences between
      X and Y in A and B"): one sub-query per entity and aspect ("Team plan price", "Enterprise plan SSO", ...);
      a head noun written once is shared ("Team and Enterprise plans" -> "Team plan", "Enterprise plan"), and so are
      lead words written once ("upgrading the gateway with Helm and with Docker Compose"); when
      entities x aspects exceed `max_subqueries`, one sub-query per aspect covering all entities;
    - **aspects** of one entity ("What are the price, rate limits and SSO options of the Business plan?"): one
      sub-query per aspect, only for lists of at least `min_aspect_list` items (two nouns joined by "and" are
      usually one thing: "terms and conditions");
    - **questions** joined by "and"/"also" or written as several sentences ("What is the SLA and which
      certifications does Corvio have, and how do I back up the gateway?"): one sub-query per question; a part
      that refers back with a pronoun ("... and how do I fix it?") stays with the question before it, as does a
      part with fewer than `min_part_terms` content words.

    **LLM tier** (optional, `chat_generator`): when the rules find no plan but the question carries one of `llm_cues`
    (a joining word, a comparison word, a comma, two question marks) and no back-reference (a pronoun ties its parts
    together, as for the rules), the model is asked to list the separate questions (`llm_prompt`, one per line).
    Its list becomes a plan (strategy `llm`) only when every line is grounded in the question: at least
    `llm_min_grounding` of its content words occur in the question and it states no number the question does not (a
    model that answers or invents a question fails this), with `min_part_terms` content words, two to
    `max_subqueries` lines, none asking what another asks (its content words a subset of the other's). Anything else
    (one line, an ungrounded line, a failed call: a warning says so) leaves the question single.

    A plan goes out on `plan` with `state["plan"]` (`strategy`, `question`, `parts`: `index`, `query`, `label`,
    `entity` and `aspect` of a comparison or aspect-list part (else None), `siblings` (the other entities compared),
    `status` "planned") and path `plan_{N}_subqueries`; anything else (one part, caller context modes, more than
    `max_subqueries` parts) goes on `single` unchanged.

    Usage:
    ```python
    from gatehouse.components.query.query_planner import QueryPlanner
    from gatehouse.components.state import new_state

    out = QueryPlanner().run(state=new_state("Compare the Team and Enterprise plans on price and SSO"))
    [p["query"] for p in out["plan"]["plan"]["parts"]]
    # ["Team plan price", "Enterprise plan price", "Team plan SSO", "Enterprise plan SSO"]
    ```
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        max_subqueries: int = 6,
        subquery_template: str = "{entity} {aspect}",
        min_part_terms: int = 2,
        min_aspect_list: int = 3,
        comparison_patterns: list[str] | None = None,
        aspect_patterns: list[str] | None = None,
        question_words: list[str] | None = None,
        back_references: list[str] | None = None,
        stopwords: list[str] | None = None,
        chat_generator: Any | None = None,
        llm_prompt: str = DEFAULT_LLM_PROMPT,
        llm_cues: list[str] | None = None,
        llm_min_grounding: float = 1.0,
    ) -> None:
        """
        :param enabled: False sends every question on `single`.
        :param max_subqueries: Most sub-queries of a plan (each part runs the answering gates once: keep it below the
            pipeline's `max_runs_per_component`).
        :param subquery_template: The sub-query of one entity's aspect (`{entity}`, `{aspect}`), in comparisons and
            aspect lists ("Team plan price"; a question form such as "What is the {aspect} of the {entity}?" answered
            no more parts of the golden multi-part cases).
        :param min_part_terms: Fewest content words a split-off question needs to stand alone.
        :param min_aspect_list: Fewest listed aspects that make one entity's question multi-part.
        :param comparison_patterns: Regexes with groups `entities` and `aspects` (case-insensitive, matched against
            the question without its final punctuation); None uses the built-in English ones.
        :param aspect_patterns: Regexes with groups `aspects` and `entities` for one entity's aspect list.
        :param question_words: Words that open a new question after "and"/"also".
        :param back_references: Pronouns that tie a part to the question before it.
        :param stopwords: Words that are not content words; None uses Gatehouse's list.
        :param chat_generator: A Haystack chat generator for the optional LLM tier; None: rules only.
        :param llm_prompt: The LLM tier's prompt; `{question}` is filled in.
        :param llm_cues: Regexes (case-insensitive) of which one must match before the LLM is asked; None uses
            `DEFAULT_LLM_CUES`.
        :param llm_min_grounding: Share of a listed question's content words that must occur in the user's question
            (compared in the singular).
        :raises ValueError: On limits out of range or a pattern without its groups.
        """
        if max_subqueries < 2:
            raise ValueError("max_subqueries must be at least 2.")
        if min_part_terms < 1 or min_aspect_list < 2:
            raise ValueError("min_part_terms must be >= 1 and min_aspect_list >= 2.")
        if not 0.0 <= llm_min_grounding <= 1.0:
            raise ValueError("llm_min_grounding must be between 0 and 1.")
        self.enabled = enabled
        self.max_subqueries = max_subqueries
        self.subquery_template = subquery_template
        self.min_part_terms = min_part_terms
        self.min_aspect_list = min_aspect_list
        self.comparison_patterns = comparison_patterns
        self.aspect_patterns = aspect_patterns
        self.question_words = question_words
        self.back_references = back_references
        self.stopwords = stopwords
        self.chat_generator = chat_generator
        self.llm_prompt = llm_prompt
        self.llm_cues = llm_cues
        self.llm_min_grounding = llm_min_grounding
        self._llm_cues = [re.compile(p, re.IGNORECASE) for p in (DEFAULT_LLM_CUES if llm_cues is None else llm_cues)]
        self._comparisons = [re.compile(p, re.IGNORECASE) for p in comparison_patterns or DEFAULT_COMPARISON_PATTERNS]
        self._aspects = [re.compile(p, re.IGNORECASE) for p in aspect_patterns or DEFAULT_ASPECT_PATTERNS]
        for pattern in [*self._comparisons, *self._aspects]:
            if not {"entities", "aspects"} <= set(pattern.groupindex):
                raise ValueError(f"pattern {pattern.pattern!r} needs the groups 'entities' and 'aspects'.")
        words = "|".join(re.escape(w) for w in question_words or DEFAULT_QUESTION_WORDS)
        self._and_split = re.compile(rf",?\s+(?:and\s+also|and|also|plus),?\s+(?=(?:{words})\b)", re.IGNORECASE)
        self._comma_split = re.compile(rf",\s+(?=(?:{words})\b)", re.IGNORECASE)
        self._question_words = frozenset(w.casefold() for w in question_words or DEFAULT_QUESTION_WORDS)
        self._back_references = frozenset(w.casefold() for w in back_references or DEFAULT_BACK_REFERENCES)
        self._stopwords = frozenset(w.casefold() for w in stopwords) if stopwords is not None else DEFAULT_STOPWORDS

    def _opens_question(self, sentence: str) -> bool:
        words = tokenize(sentence)
        return bool(words) and words[0] in self._question_words

    def _content_terms(self, text: str) -> list[str]:
        return [t for t in tokenize(text) if t not in self._stopwords and t not in self._back_references]

    def _comparison(self, question: str) -> list[dict[str, str]] | None:
        for pattern in self._comparisons:
            match = pattern.match(question)
            if not match:
                continue
            entities = _share_prefix(_share_head(_items(match["entities"])))
            aspects = _items(match["aspects"])
            if len(entities) < 2 or not aspects:
                continue
            if len(entities) * len(aspects) <= self.max_subqueries:
                return [{"query": self.subquery_template.format(entity=entity, aspect=aspect),
                         "label": f"{entity}, {aspect}", "entity": entity, "aspect": aspect,
                         "siblings": [other for other in entities if other != entity]}
                        for aspect in aspects for entity in entities]
            together = " and ".join(entities)
            return [{"query": self.subquery_template.format(entity=together, aspect=aspect),
                     "label": f"{aspect} of {together}", "entity": None, "aspect": aspect, "siblings": []}
                    for aspect in aspects]
        return None

    def _aspect_list(self, question: str) -> list[dict[str, str]] | None:
        for pattern in self._aspects:
            match = pattern.match(question)
            if not match:
                continue
            aspects = _items(match["aspects"])
            entity = _ARTICLE.sub("", match["entities"].strip())
            if len(aspects) >= self.min_aspect_list and len(_items(match["entities"])) == 1:
                return [{"query": self.subquery_template.format(entity=entity, aspect=aspect),
                         "label": f"{entity}, {aspect}", "entity": entity, "aspect": aspect, "siblings": []}
                        for aspect in aspects]
        return None

    def _questions(self, question: str) -> list[dict[str, str]] | None:
        parts: list[str] = []
        context = ""
        for sentence in _SENTENCES.split(question):
            if not sentence.endswith("?") and not self._opens_question(sentence):
                context = f"{context}{sentence} "  # a statement ("My card was declined.") belongs to the next question
                continue
            sentence, context = context + sentence, ""
            pieces = self._and_split.split(sentence)
            if len(pieces) > 1:  # "A, B, and C": the questions before the last are listed with commas
                pieces = [*self._comma_split.split(pieces[0]), *pieces[1:]]
            for number, piece in enumerate(pieces):
                piece = _TRAILING.sub("", _CONNECTIVE.sub("", piece.strip()))
                if not piece:
                    continue
                # A sentence of its own stands alone; a part split off at "and" must carry its own subject.
                minimum = self.min_part_terms if number else 1
                leans_back = bool(set(tokenize(piece)) & self._back_references)
                if parts and (leans_back or len(self._content_terms(piece)) < minimum):
                    parts[-1] = f"{parts[-1]} and {piece}"
                else:
                    parts.append(piece)
        if context and parts:
            parts[-1] = f"{parts[-1]} {context.strip()}"
        if len(parts) < 2:
            return None
        return _question_parts(parts)

    def plan(self, question: str) -> tuple[str, list[dict[str, str]]] | None:
        """
        The plan of a question.

        :param question: The (standalone) question.
        :returns: `(strategy, parts)` with each part's `query`, `label`, `entity`, `aspect` and `siblings`, or None
            for a single-part question.
        """
        text = " ".join(question.split())
        for strategy, planner, given in (("comparison", self._comparison, _TRAILING.sub("", text)),
                                         ("aspects", self._aspect_list, _TRAILING.sub("", text)),
                                         ("questions", self._questions, text)):
            parts = planner(given)
            if parts and 2 <= len(parts) <= self.max_subqueries:
                return strategy, parts
        return None

    def warm_up(self) -> None:
        """Warm up the LLM tier's chat generator, when it has a warm-up step."""
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def llm_parts(self, question: str, reply: str) -> list[dict[str, Any]] | None:
        """
        The plan parts of an LLM tier reply, or None when it is no acceptable plan (see the class docstring).

        :param question: The user's question.
        :param reply: The model's reply: one question per line, or `SINGLE`.
        :returns: The parts, or None.
        """
        asked = {singular(t) for t in self._content_terms(question)}
        parts: list[str] = []
        seen: list[set[str]] = []
        for line in reply.splitlines():
            text = _TRAILING.sub("", _LLM_LINE_MARKER.sub("", line.strip().strip('"'))).strip()
            if not text or text.upper() == "SINGLE":
                continue
            terms = {singular(t) for t in self._content_terms(text)}
            if len(terms) < self.min_part_terms or len(terms & asked) < self.llm_min_grounding * len(terms):
                return None
            if any(any(ch.isdigit() for ch in term) for term in terms - asked):  # a figure the user did not write
                return None
            if any(terms <= other or other <= terms for other in seen):  # one question asked twice
                return None
            seen.append(terms)
            parts.append(text)
        if not 2 <= len(parts) <= self.max_subqueries:
            return None
        return _question_parts(parts)

    def _ask_llm(self, question: str) -> tuple[list[dict[str, Any]] | None, str | None]:
        """The LLM tier's parts (None: single) and a warning when the call failed."""
        if self.chat_generator is None or not any(cue.search(question) for cue in self._llm_cues):
            return None, None
        if set(tokenize(question)) & self._back_references:  # "... and how do I fix it?" is one question
            return None, None
        try:
            reply = ask_chat_generator(self.chat_generator, self.llm_prompt.replace("{question}", question))
        except Exception as error:  # noqa: BLE001 - any generator failure leaves the question single
            return None, f"planner: LLM tier failed ({type(error).__name__}); the question was answered as one"
        return self.llm_parts(question, reply), None

    @component.output_types(single=State, plan=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Plan the question.

        :param state: The request state; reads `condensed_query` (or `query`) and `mode`.
        :returns: `plan` with `state["plan"]`, or `single` with the state unchanged (but for a warning when the LLM
            tier failed).
        """
        started = time.perf_counter()
        question = str(state.get("condensed_query") or state.get("query") or "")
        if not self.enabled or state.get("mode", "full-corpus") != "full-corpus":
            return {"single": state}
        planned = self.plan(question)
        if planned is None:
            parts, warning = self._ask_llm(" ".join(question.split()))
            if parts is None:
                return {"single": with_validation(state, "confidence_warnings", warning) if warning else state}
            planned = ("llm", parts)
        strategy, parts = planned
        plan = {
            "strategy": strategy,
            "question": question,
            "parts": [{"index": i, "query": p["query"], "label": p["label"], "entity": p["entity"],
                       "aspect": p["aspect"], "siblings": p["siblings"], "status": "planned"}
                      for i, p in enumerate(parts)],
        }
        return {"plan": advance(state, stage="planner", started=started, steps=[f"plan_{len(parts)}_subqueries"],
                                plan=plan)}

    def to_dict(self) -> dict[str, Any]:
        """Serialise the component."""
        return default_to_dict(
            self,
            enabled=self.enabled,
            max_subqueries=self.max_subqueries,
            subquery_template=self.subquery_template,
            min_part_terms=self.min_part_terms,
            min_aspect_list=self.min_aspect_list,
            comparison_patterns=self.comparison_patterns,
            aspect_patterns=self.aspect_patterns,
            question_words=self.question_words,
            back_references=self.back_references,
            stopwords=self.stopwords,
            chat_generator=chat_generator_to_dict(self.chat_generator),
            llm_prompt=self.llm_prompt,
            llm_cues=self.llm_cues,
            llm_min_grounding=self.llm_min_grounding,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "QueryPlanner":
        """Deserialise the component (the LLM tier's chat generator too)."""
        return default_from_dict(cls, chat_generator_from_init_parameters(data))
