"""
Answers the questions that the intent gate sends past retrieval: arithmetic, greetings, general questions.

Arithmetic is found and evaluated safely by `gatehouse.components.generators.arithmetic`: nothing is ever passed to
`eval`.
"""

import ast
import re
import time
from typing import Any

from haystack import component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.generators.arithmetic import (
    ExpressionFinder,
    ExpressionTooLargeError,
    UnsafeExpressionError,
    evaluate_arithmetic,
    format_number,
)
from gatehouse.components.setting_groups import MovedSettings, setting_group
from gatehouse.components.tiered_classifier import compile_pattern
from gatehouse.components.state import State, advance, with_validation

DEFAULT_GREETING_PATTERNS = [
    r"^(hi|hello|hey|hiya|howdy|greetings|hallo|bonjour|hola|ciao|hej|salut|привет)\b",
    r"^good (morning|afternoon|evening|day)\b",
    r"^what can you (do|help( me| us)? with)\b",
]
DEFAULT_THANKS_PATTERNS = [r"^(thanks|thank you|thank u|thx|ty|cheers|many thanks|much appreciated)\b"]
DEFAULT_FAREWELL_PATTERNS = [r"^(bye|goodbye|good bye|see you|see ya|farewell)\b"]

DEFAULT_GREETING_MESSAGE = (
    "Hello! I answer questions about the documentation in my knowledge bases, with citations to the sources. "
    "Ask me about a product, a procedure or a policy."
)
DEFAULT_THANKS_MESSAGE = "You're welcome! Ask me anything else about the documentation in my knowledge bases."
DEFAULT_FAREWELL_MESSAGE = "Goodbye! Come back any time with questions about the documentation."
DEFAULT_NO_MODEL_MESSAGE = (
    "This question doesn't need the knowledge bases, and no general-purpose language model is configured to "
    "answer it, so I can't answer it here. I can answer questions about the documentation in my knowledge bases "
    "and simple arithmetic."
)
DEFAULT_LLM_ERROR_MESSAGE = (
    "This question doesn't need the knowledge bases, but the general-purpose language model could not be reached, "
    "so I can't answer it right now. Please try again later."
)
DEFAULT_SYSTEM_PROMPT = (
    "You are a concise technical assistant. Answer the user's general question directly and briefly. If you do not "
    "know the answer, say so; never invent facts."
)

#: `arithmetic`: what an arithmetic question is made of: `operator_words` (words or symbols read as operators: "plus",
#: "times", "×", "^"), `prefixes` (phrases that may open it: "what is") and `suffixes` (phrases that may close it:
#: "equals"); None: the built-in lists (`gatehouse.components.generators.arithmetic`).
DEFAULT_ARITHMETIC: dict[str, Any] = {"operator_words": None, "prefixes": None, "suffixes": None}
#: `limits`: the bounds of arithmetic (exponent, digits of any result, length of the expression), the significant
#: digits of a non-integral result, and the longest message taken as a greeting, thanks or farewell.
DEFAULT_LIMITS: dict[str, int | float] = {
    "max_exponent": 1000,
    "max_result_digits": 100,
    "max_expression_chars": 200,
    "significant_digits": 12,
    "max_greeting_words": 6,
}
#: `social_patterns`: regular expressions (case-insensitive, matched at the start of the message) per kind of social
#: message, tried in this order; the reply is the message of the same name.
DEFAULT_SOCIAL_PATTERNS: dict[str, list[str]] = {
    "thanks": DEFAULT_THANKS_PATTERNS,
    "farewell": DEFAULT_FAREWELL_PATTERNS,
    "greeting": DEFAULT_GREETING_PATTERNS,
}
#: `messages`: the replies. `arithmetic`, `division_by_zero` and `too_large` get `{expression}` (and `{result}`)
#: replaced; `no_model` and `llm_error` say honestly why a general question is not answered.
DEFAULT_MESSAGES: dict[str, str] = {
    "arithmetic": "{expression} = {result}.",
    "division_by_zero": "{expression} is undefined: division by zero.",
    "too_large": "{expression} is outside the range I can calculate here.",
    "greeting": DEFAULT_GREETING_MESSAGE,
    "thanks": DEFAULT_THANKS_MESSAGE,
    "farewell": DEFAULT_FAREWELL_MESSAGE,
    "no_model": DEFAULT_NO_MODEL_MESSAGE,
    "llm_error": DEFAULT_LLM_ERROR_MESSAGE,
}
#: Where each setting of a YAML written before the groups went.
MOVED_SETTINGS = {
    "operator_words": "arithmetic.operator_words",
    "arithmetic_prefixes": "arithmetic.prefixes",
    "arithmetic_suffixes": "arithmetic.suffixes",
    **{name: f"limits.{name}" for name in DEFAULT_LIMITS},
    **{f"{kind}_patterns": f"social_patterns.{kind}" for kind in DEFAULT_SOCIAL_PATTERNS},
    **{f"{kind}_message": f"messages.{kind}" for kind in DEFAULT_MESSAGES if kind != "arithmetic"},
    "arithmetic_template": "messages.arithmetic",
}


def _social_rules(social_patterns: dict[str, list[str]]) -> list[tuple[str, list[re.Pattern[str]]]]:
    """`(kind, compiled patterns)` in the order they are tried."""
    rules = []
    for kind, patterns in social_patterns.items():
        if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)):
            raise ValueError(f"'social_patterns.{kind}' must be a list of regular expressions, got {patterns!r}.")
        rules.append((kind, [compile_pattern(p, f"social_patterns.{kind}") for p in patterns]))
    return rules


@component
class DirectAnswerer(MovedSettings, ChatGeneratorSerialization):
    """
    Answers without retrieval, for the intent gate's `direct` route (seed 000's `skip_retrieval`).

    In order: a safe arithmetic evaluation when the whole question is arithmetic ("What is 12 * 7?" ->
    "12 * 7 = 84."; words such as "plus", "times", "divided by" work; only `arithmetic.prefixes` and
    `arithmetic.suffixes` may surround the expression, so "How would one write T(n) = 7n2 + 15n + 40 in big O
    notation?" is not arithmetic); a short polite reply to greetings, thanks and farewells; otherwise the optional
    general `chat_generator`, and with none configured an honest reply that no general model is set up (status
    `"partial"`), never an invented answer. Sets `answer`, `status`, `citations` (`[]`), `generator`
    (`"arithmetic"` | `"greeting"` | `"llm"` | `"none"`) and appends `direct_answer` to the path.

    The groups `arithmetic`, `limits`, `social_patterns` and `messages` take the keys of `DEFAULT_ARITHMETIC`,
    `DEFAULT_LIMITS`, `DEFAULT_SOCIAL_PATTERNS` and `DEFAULT_MESSAGES`; a key left out keeps its default.

    Usage:
    ```python
    from gatehouse.components.generators.direct_answerer import DirectAnswerer
    from gatehouse.components.state import new_state

    answerer = DirectAnswerer(messages={"greeting": "Hi! Ask me about gizmos."})
    answerer.run(state=new_state("What is 12 * 7?"))["state"]["answer"]   # "12 * 7 = 84."
    ```
    """

    moved_settings = MOVED_SETTINGS

    def __init__(
        self,
        *,
        arithmetic: dict[str, Any] | None = None,
        limits: dict[str, int | float] | None = None,
        social_patterns: dict[str, list[str]] | None = None,
        messages: dict[str, str] | None = None,
        chat_generator: Any = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_history_turns: int = 4,
    ) -> None:
        """
        Create the answerer.

        :param arithmetic: Operator words and the phrases that may surround an expression (`DEFAULT_ARITHMETIC`).
        :param limits: Bounds of arithmetic and of a greeting's length (`DEFAULT_LIMITS`).
        :param social_patterns: Regexes of `greeting`, `thanks` and `farewell` messages (`DEFAULT_SOCIAL_PATTERNS`).
        :param messages: The replies (`DEFAULT_MESSAGES`).
        :param chat_generator: Optional Haystack chat generator for general questions; None (default) disables it.
        :param system_prompt: System prompt for the general model.
        :param max_history_turns: Earlier user/assistant pairs passed to the general model.
        :raises ValueError: On an unknown key in a group or a malformed pattern.
        """
        self.arithmetic = setting_group("arithmetic", arithmetic, DEFAULT_ARITHMETIC)
        self.limits = setting_group("limits", limits, DEFAULT_LIMITS)
        self.social_patterns = setting_group("social_patterns", social_patterns, DEFAULT_SOCIAL_PATTERNS)
        self.messages = setting_group("messages", messages, DEFAULT_MESSAGES)
        self.chat_generator = chat_generator
        self.system_prompt = system_prompt
        self.max_history_turns = max_history_turns
        self._finder = ExpressionFinder(self.arithmetic["operator_words"], self.arithmetic["prefixes"],
                                        self.arithmetic["suffixes"], self.limits["max_expression_chars"])
        self._social = _social_rules(self.social_patterns)

    def warm_up(self) -> None:
        """Warm up the optional chat generator."""
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def find_expression(self, question: str) -> str | None:
        """
        The arithmetic expression that makes up the whole question, if it has at least one operation.

        :param question: E.g. `"What is 12 times 7?"`.
        :returns: The expression text (`"12 * 7"`), or None when the question is anything but arithmetic.
        """
        return self._finder.find(question)

    def _arithmetic(self, question: str) -> tuple[str, str] | None:
        expression = self.find_expression(question)
        if expression is None:
            return None
        shown = ast.unparse(ast.parse(expression, mode="eval"))
        limits, messages = self.limits, self.messages
        try:
            value = evaluate_arithmetic(
                expression, max_exponent=limits["max_exponent"], max_result_digits=limits["max_result_digits"]
            )
        except ZeroDivisionError:
            return messages["division_by_zero"].replace("{expression}", shown), "success"
        except ExpressionTooLargeError:
            return messages["too_large"].replace("{expression}", shown), "partial"
        except UnsafeExpressionError:
            return None
        result = format_number(value, limits["significant_digits"])
        return messages["arithmetic"].replace("{expression}", shown).replace("{result}", result), "success"

    def _social_reply(self, question: str) -> str | None:
        text = " ".join(re.sub(r"[^\w\s']", " ", question).split())
        if not text or len(text.split()) > self.limits["max_greeting_words"]:
            return None
        for kind, patterns in self._social:
            if any(p.search(text) for p in patterns):
                return self.messages[kind]
        return None

    @component.output_types(state=State)
    def run(self, state: State, deadline: float | None = None) -> dict[str, dict[str, Any]]:
        """
        Answer the question directly.

        :param state: The request state; reads `original_query` (or `query`) and `history`.
        :param deadline: `time.monotonic()` by which the request must be answered (the LLM tier's calls fit in it).
        :returns: `state`, a new state with `answer`, `status`, `citations`, `generator`.
        """
        started = time.perf_counter()
        question = str(state.get("original_query") or state.get("query") or "").strip()
        base = state
        warning = None

        arithmetic = self._arithmetic(question) if question else None
        social = self._social_reply(question) if arithmetic is None else None
        if arithmetic is not None:
            answer, status, generator = arithmetic[0], arithmetic[1], "arithmetic"
        elif social is not None:
            answer, status, generator = social, "success", "greeting"
        elif self.chat_generator is not None and question:
            history = list(state.get("history") or [])[-2 * self.max_history_turns :] if self.max_history_turns else []
            try:
                answer = ask_chat_generator(
                    self.chat_generator, question, system_prompt=self.system_prompt, history=history, deadline=deadline
                )
                status, generator = "success", "llm"
            except Exception as error:  # noqa: BLE001 - a failing model gets an honest reply, never a crash
                answer, status, generator = self.messages["llm_error"], "partial", "none"
                warning = f"direct_answerer: general model failed ({type(error).__name__}: {error})"
        else:
            answer, status, generator = self.messages["no_model"], "partial", "none"

        if warning:
            base = with_validation(state, "confidence_warnings", warning)
        return {
            "state": advance(
                base,
                stage="direct_answerer",
                started=started,
                steps=["direct_answer"],
                answer=answer,
                status=status,
                citations=[],
                generator=generator,
            )
        }
