"""The planner's decomposer: splits a multi-part question into sub-queries (seed 002's planning step)."""

import re
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from haystack import component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.query.followup_rules import FollowUpRules
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.terms import DEFAULT_STOPWORDS, same_words, singular, stem, tokenize
from gatehouse.components.text_units import DEFAULT_ABBREVIATIONS

DEFAULT_QUESTION_WORDS = ["what", "which", "how", "where", "when", "who", "why", "is", "are", "can", "could", "do",
                          "does", "did", "should", "will", "would", "if"]
DEFAULT_BACK_REFERENCES = ["it", "its", "they", "them", "their", "these", "those"]
#: Words that ask to set things side by side: with them, a list at the end of a question is one part per item.
DEFAULT_COMPARISON_CUES = [r"\bcompar\w*", r"\bdifferen\w*", r"\bdiffer\b", r"\bvs\.?", r"\bversus\b", r"\bboth\b",
                           r"\beach\b"]
#: The words the rules read: every key of `QueryPlanner`'s `grammar`, with its default (an empty list or None: the
#: default list; `stopwords` None: Gatehouse's list).
DEFAULT_GRAMMAR: dict[str, Any] = {
    "question_words": DEFAULT_QUESTION_WORDS,  # words that open a new question after "and"/"also"/a comma
    "back_references": DEFAULT_BACK_REFERENCES,  # pronouns that tie a part to the question before it
    "comparison_cues": DEFAULT_COMPARISON_CUES,  # regexes of words that ask to set a list's items side by side
    "stopwords": None,  # words that are not content words
}
#: What makes a question the rules did not split worth asking the LLM tier about: a joining word ("and", "or"), a
#: comparison word, a comma, or two question marks.
DEFAULT_LLM_CUES = [r"\band\b", r"\bor\b", r"\balso\b", r"\bplus\b", r",", r"\?.*\?",
                    r"\b(?:vs\.?|versus|compar\w*|differ\w*)\b"]
#: Few-shot: a 1.5B model given a "reply SINGLE" option replied SINGLE to every question; listing always (one line
#: for one question) lets it split.
DEFAULT_LLM_PROMPT = (
    "List the separate questions in the user's message, one per line. Each question must stand alone (repeat the "
    "subject instead of \"it\"). Use the user's own words. Do not answer.\n\n"
    "Message: How large can an upload be and can I resume it?\n"
    "1. How large can an upload be?\n2. Can I resume an upload?\n\n"
    "Message: What are the storage limits of the basic and premium tiers?\n"
    "1. What are the storage limits of the basic tier?\n2. What are the storage limits of the premium tier?\n\n"
    "Message: Why does my upload fail with error 413 and how do I fix the upload?\n"
    "1. Why does my upload fail with error 413 and how do I fix the upload?\n\n"
    "Message: {question}"
)
#: The optional LLM tier: its `prompt` (`{question}` filled in), the `cues` (case-insensitive regexes) of which one
#: must match before it is asked (None: `DEFAULT_LLM_CUES`) and `min_grounding`, the share of a listed question's
#: content words (in the singular) that must be the user's.
LLM: dict[str, Any] = {"prompt": DEFAULT_LLM_PROMPT, "cues": None, "min_grounding": 1.0}
_LLM_LINE_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)]|q\d+[:.)])\s*", re.IGNORECASE)
_TRAILING = re.compile(r"[\s?!.;:]+$")
_SENTENCES = re.compile(r"(?<=[?!.;])\s+")
#: Words that join a question to the one before without adding to it ("and separately, how do I ...").
_CONNECTIVE = re.compile(r"^(?:(?:and|but|so|ok|okay|oh)\b,?\s*)*(?:also|plus|separately|additionally|besides|"
                         r"finally|then|lastly|secondly|in addition)?\b,?\s*", re.IGNORECASE)
_PREPOSITIONS = ("for", "of", "on", "in", "with", "to", "from", "about", "between", "under", "using", "via")
_ITEM_SEPARATOR = re.compile(r"\s*(?:,\s*(?:and|or)?\s*(?:also\s+)?|\s+(?:and|or|vs\.?|versus)\s+(?:also\s+)?)\s*",
                             re.IGNORECASE)
_OPENING_CUE = re.compile(r"^(?:please\s+)?(?:compare|contrast)\s+", re.IGNORECASE)
MAX_ITEM_WORDS = 5
#: A clause opened by one of these and not followed by an auxiliary ("when I pass a string, ...") is a condition of
#: the question after it, not a question; so is a short opening that asks nothing ("and by default, how long ...").
_CONDITIONS = frozenset(["if", "when", "once", "while", "unless", "after", "before", "since"])
#: A sentence's opening clause that starts with one of these ("Besides the default logger, which ...", "For a large
#: upload, how ...") sets the scene for the question after it: it is no question of its own.
_SCENE_SETTERS = frozenset([*_PREPOSITIONS, "besides", "apart", "aside", "except", "beyond", "unlike", "like"])
_AUXILIARIES = frozenset("is are was were do does did can could will would should shall has have had may might "
                         "must".split())


@dataclass(frozen=True)
class _Grammar:
    """The planner's `grammar`, compiled."""

    question_words: frozenset[str]
    back_references: frozenset[str]
    stopwords: frozenset[str]
    comparison: re.Pattern[str]  # any comparison cue
    split: re.Pattern[str]  # where a clause that opens with a question word begins


def _compile_grammar(grammar: dict[str, Any] | None) -> _Grammar:
    settings = setting_group("grammar", grammar, DEFAULT_GRAMMAR)
    question_words = settings["question_words"] or DEFAULT_QUESTION_WORDS
    words = "|".join(re.escape(w) for w in question_words)
    stopwords = settings["stopwords"]
    return _Grammar(
        question_words=frozenset(w.casefold() for w in question_words),
        back_references=frozenset(w.casefold() for w in settings["back_references"] or DEFAULT_BACK_REFERENCES),
        stopwords=frozenset(w.casefold() for w in stopwords) if stopwords is not None else DEFAULT_STOPWORDS,
        comparison=re.compile("|".join(settings["comparison_cues"] or DEFAULT_COMPARISON_CUES), re.IGNORECASE),
        split=re.compile(rf"(?:,?\s+(?:and\s+also|and|also|plus|but)|,|;)\s*,?\s*"
                         rf"(?=(?:(?:{'|'.join(_PREPOSITIONS)})\s+)?(?:{words})\b)", re.IGNORECASE),
    )


def _check_settings(max_subqueries: int, min_part_terms: int, min_grounding: float) -> None:
    if max_subqueries < 2:
        raise ValueError("max_subqueries must be at least 2.")
    if min_part_terms < 1:
        raise ValueError("min_part_terms must be at least 1.")
    if not 0.0 <= min_grounding <= 1.0:
        raise ValueError("llm.min_grounding must be between 0 and 1.")


def _sentences(text: str) -> list[str]:
    """The sentences of a message: split after `?`, `!`, `;` and `.`, but not after an abbreviation ("i.e.")."""
    sentences: list[str] = []
    for piece in _SENTENCES.split(text):
        words = sentences[-1].split() if sentences else []
        if words and words[-1].casefold().rstrip(".") in DEFAULT_ABBREVIATIONS and words[-1].endswith("."):
            sentences[-1] = f"{sentences[-1]} {piece}"
        else:
            sentences.append(piece)
    return sentences


def _shared_tail(items: list[str]) -> list[str]:
    """
    "sync", "async clients" -> "sync clients", "async clients": words written once after the second of two items
    belong to a one-word first item.
    """
    *rest, last = items or [""]
    words = last.split()
    if len(rest) != 1 or len(words) < 2 or len(rest[0].split()) != 1:  # only "A and B C": "A, B and C D" is a list
        return items
    return [f"{item} {' '.join(words[1:])}" for item in rest] + [last]


def _question_parts(questions: list[str]) -> list[dict[str, Any]]:
    """Plan parts of questions that stand alone: the question as query and label."""
    return [{"query": f"{q[0].upper()}{q[1:]}?", "label": f"{q[0].upper()}{q[1:]}"} for q in questions]


@component
class QueryPlanner(MovedSettings, ChatGeneratorSerialization):
    """
    Decides whether a question has several parts and, if so, plans one sub-query per part. Without a model, by two
    general rules of English:

    - **separate questions**: sentences, and clauses joined by "and", "also" or a comma that open with a question
      word ("What is the default timeout, and which exception is raised when it runs out?"). A part that refers back
      with a pronoun gets the previous part's topic in its place, as a follow-up does (the condenser's rules:
      "which exception is raised when the default timeout runs out"); a part too short to stand alone stays with the
      part before it.
    - **coordination with a shared head**: a list at the end of a question whose items repeat a preposition ("what
      to install for HTTP/2, for brotli and also for SOCKS proxies"), or any list after a comparison word ("compare
      the default ports of A and B", "differences between A, B and C") becomes one part per item with the shared
      words ("the default ports of A", "the default ports of B"). Two items joined by "and" without such a cue
      stay one question ("read and write timeouts").

    **LLM tier** (optional, `chat_generator`): when the rules find no plan but the question carries one of `llm.cues`
    (a joining word, a comparison word, a comma, two question marks) and no back-reference, the model is asked to list
    the separate questions (`llm.prompt`, one per line). Its list becomes a plan (strategy `llm`) only when every line
    is grounded in the question: at least `llm.min_grounding` of its content words occur in the question and it
    states no number the question does not, with `min_part_terms` content words, two to `max_subqueries` lines, none
    asking what another asks. Anything else (one line, an ungrounded line, a failed call: a warning says so) leaves
    the question single.

    A plan goes out in `state["plan"]` (`strategy` questions | coordination | llm, `question`, `parts`: `index`,
    `query`, `label`, `status` "planned") with path `plan_{N}_subqueries`; anything else (one part, caller context
    modes, more than `max_subqueries` parts) goes on unchanged. The search and answer pipelines run once per part of
    a plan.

    Usage:
    ```python
    from gatehouse.components.query.query_planner import QueryPlanner
    from gatehouse.components.state import new_state

    out = QueryPlanner().run(state=new_state("Compare the default ports of the server and the agent"))
    [p["query"] for p in out["state"]["plan"]["parts"]]
    # ["The default ports of the server?", "The default ports of the agent?"]
    ```
    """

    #: Settings that moved into `grammar` and `llm` (a YAML still naming one is refused with its new place).
    moved_settings: ClassVar[dict[str, str]] = {
        **{name: f"grammar.{name}" for name in ("question_words", "back_references", "comparison_cues", "stopwords")},
        **{f"llm_{name}": f"llm.{name}" for name in LLM},
    }

    def __init__(
        self,
        *,
        enabled: bool = True,
        max_subqueries: int = 6,
        min_part_terms: int = 2,
        grammar: dict[str, Any] | None = None,
        chat_generator: Any | None = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        """
        :param enabled: False leaves every question single.
        :param max_subqueries: Most sub-queries of a plan (each part is searched and answered once).
        :param min_part_terms: Fewest content words a split-off question needs to stand alone.
        :param grammar: The rules' words, keys of `DEFAULT_GRAMMAR` (a key left out keeps its default).
        :param chat_generator: A Haystack chat generator for the optional LLM tier; None: rules only.
        :param llm: The LLM tier's `prompt`, `cues` and `min_grounding` (`LLM`: keys and defaults).
        :raises ValueError: On limits out of range or an unknown key of a group.
        """
        self.enabled = enabled
        self.max_subqueries = max_subqueries
        self.min_part_terms = min_part_terms
        self.grammar = grammar
        self.chat_generator = chat_generator
        self.llm = setting_group("llm", llm, LLM)
        _check_settings(max_subqueries, min_part_terms, self.llm["min_grounding"])
        self._grammar = _compile_grammar(grammar)
        cues = DEFAULT_LLM_CUES if self.llm["cues"] is None else self.llm["cues"]
        self._llm_cues = [re.compile(p, re.IGNORECASE) for p in cues]
        self._resolver = FollowUpRules(grammar={"pronouns": sorted(self._grammar.back_references), "noun_pronouns": []},
                                       max_condense_words=40, max_reference_content_terms=40)

    def _opens_question(self, sentence: str) -> bool:
        words = tokenize(sentence)
        return bool(words) and words[0] in self._grammar.question_words

    def _content_terms(self, text: str) -> list[str]:
        grammar = self._grammar
        return [t for t in tokenize(text) if t not in grammar.stopwords and t not in grammar.back_references]

    def _shares_terms(self, piece: str, parts: list[str]) -> bool:
        """Whether a part names a content word (stemmed) of an earlier part."""
        earlier = {stem(t) for part in parts for t in self._content_terms(part)}
        return any(stem(t) in earlier for t in self._content_terms(piece))

    def _questions(self, question: str) -> list[str]:
        """The separate questions of a message, pronouns referring to an earlier part resolved."""
        parts: list[str] = []
        context = ""
        for sentence in _sentences(question):
            if not sentence.endswith("?") and not self._opens_question(sentence) and not parts:
                context = f"{context}{sentence} "  # a statement ("My upload failed.") belongs to the next question
                continue
            sentence, context = context + sentence, ""
            pieces = self._grammar.split.split(sentence)
            condition = ""
            number = -1
            for position, piece in enumerate(pieces):
                first_word = tokenize(piece)[:1]
                piece = _TRAILING.sub("", _CONNECTIVE.sub("", piece.strip()))
                if not piece:
                    continue
                number += 1  # a sentence's first question stands alone; later ones must carry their own subject
                opening = tokenize(piece)[:2]
                if position + 1 < len(pieces) and opening and (
                        (position == 0 and first_word[0] in _SCENE_SETTERS)
                        or (opening[0] in _CONDITIONS and (len(opening) < 2 or opening[1] not in _AUXILIARIES))
                        or (not parts and not self._opens_question(piece)
                            and len(self._content_terms(piece)) < self.min_part_terms)):
                    condition = f"{condition}{piece}, "
                    continue
                piece, condition = condition + piece, ""
                if parts and set(tokenize(piece)) & self._grammar.back_references:
                    resolved = self._resolver.condense(piece, [{"role": "user", "content": parts[-1]}])
                    if resolved == piece:  # nothing to refer to: it stays with the part before it
                        parts[-1] = f"{parts[-1]} and {piece}"
                        continue
                    piece = resolved
                minimum = self.min_part_terms if number else 1
                if parts and len(self._content_terms(piece)) < minimum:
                    parts[-1] = f"{parts[-1]} and {piece}"
                    continue
                if parts and not self._resolver.names_a_subject(piece) and not self._shares_terms(piece, parts):
                    piece = self._resolver.in_context(piece, parts[0])  # "which setting raises it?": the first topic
                parts.append(piece)
        if context and parts:
            parts[-1] = f"{parts[-1]} {context.strip()}"
        return parts

    def _coordination(self, question: str) -> list[str] | None:
        """One question per item of a list with a shared head (see the class docstring), or None."""
        text = _TRAILING.sub("", question)
        cue = bool(self._grammar.comparison.search(text))
        words = text.split()
        for start in range(len(words)):
            preposition = words[start].casefold()
            if preposition not in _PREPOSITIONS:
                continue
            tail = " ".join(words[start + 1:])
            repeated = re.split(rf"\s*(?:,\s*(?:(?:and|or)\s+)?(?:also\s+)?|\s+(?:and|or)\s+(?:also\s+)?)"
                                rf"{re.escape(preposition)}\s+", tail, flags=re.IGNORECASE)
            if len(repeated) >= 2:  # "for A, for B and also for C"
                items = repeated
            elif cue:
                items = _shared_tail([item for item in _ITEM_SEPARATOR.split(tail) if item])
            else:
                continue
            if len(items) < 2 or any(len(item.split()) > MAX_ITEM_WORDS for item in items):
                continue
            head = _OPENING_CUE.sub("", " ".join(words[:start])).strip()
            lead = f"{head} {preposition}" if self._content_terms(self._grammar.comparison.sub(" ", head)) else ""
            return [f"{lead} {item}".strip() for item in items]
        if cue:  # "Compare A and B", "A vs B": the items are the whole question after the cue
            rest = _OPENING_CUE.sub("", text)
            items = _shared_tail([item for item in _ITEM_SEPARATOR.split(rest) if item])
            if 2 <= len(items) and all(len(item.split()) <= MAX_ITEM_WORDS for item in items):
                return items
        return None

    def plan(self, question: str) -> tuple[str, list[dict[str, Any]]] | None:
        """
        The plan of a question.

        :param question: The (standalone) question.
        :returns: `(strategy, parts)` with each part's `query` and `label`, or None for a single-part question.
        """
        text = " ".join(question.split())
        questions = self._questions(text)
        if len(questions) >= 2:
            expanded = [part for q in questions for part in (self._coordination(q) or [q])]
            if len(expanded) <= self.max_subqueries:
                return "questions", _question_parts(expanded)
            if len(questions) <= self.max_subqueries:
                return "questions", _question_parts(questions)
            return None
        parts = self._coordination(text)
        if parts and 2 <= len(parts) <= self.max_subqueries:
            return "coordination", _question_parts(parts)
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
            if len(terms) < self.min_part_terms or len(terms & asked) < self.llm["min_grounding"] * len(terms):
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

    def _ask_llm(self, question: str, deadline: float | None) -> tuple[list[dict[str, Any]] | None, str | None]:
        """The LLM tier's parts (None: single) and a warning when the call failed."""
        if self.chat_generator is None or not any(cue.search(question) for cue in self._llm_cues):
            return None, None
        if set(tokenize(question)) & self._grammar.back_references:  # "... and how do I fix it?" is one question
            return None, None
        try:
            reply = ask_chat_generator(self.chat_generator, self.llm["prompt"].replace("{question}", question),
                                       deadline=deadline)
        except Exception as error:  # noqa: BLE001 - any generator failure leaves the question single
            return None, f"planner: LLM tier failed ({type(error).__name__}); the question was answered as one"
        return self.llm_parts(question, reply), None

    @component.output_types(state=State)
    def run(self, state: State, deadline: float | None = None) -> dict[str, dict[str, Any]]:
        """
        Plan the question.

        :param state: The request state; reads `condensed_query` (or `query`), `original_query` (a follow-up is
            split only where the user's own words are) and `mode`.
        :param deadline: `time.monotonic()` by which the request must be answered (the LLM tier's calls fit in it).
        :returns: `state`, with `plan` when the question has several parts, else unchanged (but for a warning when
            the LLM tier failed).
        """
        started = time.perf_counter()
        question = str(state.get("condensed_query") or state.get("query") or "")
        if not self.enabled or state.get("mode", "full-corpus") != "full-corpus":
            return {"state": state}
        planned = self.plan(question)
        # A follow-up the condenser put in context ("Regarding X, what if ...?") is as many questions as the user asked
        own = str(state.get("original_query") or question)
        followup = not same_words(own, question)
        if planned is not None and followup and self.plan(own) is None:
            planned = None
        if planned is None:
            if followup and not any(cue.search(own) for cue in self._llm_cues):
                return {"state": state}
            parts, warning = self._ask_llm(" ".join(question.split()), deadline)
            if parts is None:
                return {"state": with_validation(state, "confidence_warnings", warning) if warning else state}
            planned = ("llm", parts)
        strategy, parts = planned
        plan = {
            "strategy": strategy,
            "question": question,
            "parts": [{"index": i, "query": p["query"], "label": p["label"], "status": "planned"}
                      for i, p in enumerate(parts)],
        }
        return {"state": advance(state, stage="planner", started=started, steps=[f"plan_{len(parts)}_subqueries"],
                                plan=plan)}
