"""
Answers the questions that the intent gate sends past retrieval: arithmetic, greetings, general questions.

Arithmetic is evaluated safely: the expression is parsed with `ast` and only numbers, `+ - * / // % **` (with a
bounded exponent and result size), parentheses and unary signs are evaluated; nothing is ever passed to `eval`.
"""

import ast
import math
import operator
import re
import time
from typing import Any

from haystack import component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.state import State, advance, with_validation

DEFAULT_OPERATOR_WORDS: dict[str, str] = {
    "to the power of": "**",
    "raised to the power of": "**",
    "raised to": "**",
    "multiplied by": "*",
    "divided by": "/",
    "times": "*",
    "plus": "+",
    "minus": "-",
    "modulo": "%",
    "mod": "%",
    "squared": "** 2",
    "cubed": "** 3",
    "×": "*",
    "·": "*",
    "÷": "/",
    "−": "-",
    "^": "**",
}

#: Words that may open or close a purely arithmetic question ("What is 2 + 2?", "What does 6 * 7 equal?").
DEFAULT_ARITHMETIC_PREFIXES = [
    "please", "can you", "could you", "what is", "what's", "whats", "what does", "how much is", "calculate",
    "compute", "evaluate", "solve",
]  # fmt: skip
DEFAULT_ARITHMETIC_SUFFIXES = ["equal", "equals", "make", "come to"]

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

_ALLOWED_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_ALLOWED_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_EXPRESSION_RE = re.compile(r"[\d.\s+\-*/%()]+")


class UnsafeExpressionError(ValueError):
    """The text is not an expression the safe evaluator accepts (names, calls, attributes, strings...)."""


class ExpressionTooLargeError(ValueError):
    """The expression's exponent or result exceeds the configured bounds."""


def evaluate_arithmetic(expression: str, *, max_exponent: float = 1000, max_result_digits: int = 100) -> int | float:
    """
    Evaluate an arithmetic expression safely.

    :param expression: Text such as `"(2 + 3) * 4"`.
    :param max_exponent: Largest absolute exponent allowed in `**`.
    :param max_result_digits: Largest number of integer digits of any intermediate or final result.
    :returns: The value.
    :raises UnsafeExpressionError: For anything but numbers, the allowed operators and parentheses.
    :raises ExpressionTooLargeError: For a too large exponent or result (or a power too small to represent).
    :raises ZeroDivisionError: For a division or modulo by zero.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise UnsafeExpressionError(f"not an arithmetic expression: {expression!r}") from error

    def check(value: int | float) -> int | float:
        if isinstance(value, complex):
            raise UnsafeExpressionError("the result is not a real number")
        if isinstance(value, float) and not math.isfinite(value):
            raise ExpressionTooLargeError("the result is too large")
        if isinstance(value, int) and value.bit_length() > max_result_digits * math.log2(10) + 1:
            raise ExpressionTooLargeError("the result is too large")
        if isinstance(value, float) and abs(value) >= 10.0**max_result_digits:
            raise ExpressionTooLargeError("the result is too large")
        return value

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return check(node.value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _ALLOWED_UNARY:
            return check(_ALLOWED_UNARY[type(node.op)](walk(node.operand)))
        if isinstance(node, ast.BinOp) and type(node.op) in _ALLOWED_BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow):
                if abs(right) > max_exponent:
                    raise ExpressionTooLargeError(f"the exponent {right} exceeds {max_exponent}")
                if abs(left) > 1 and right > 0 and right * math.log10(abs(left)) > max_result_digits:
                    raise ExpressionTooLargeError("the result is too large")
            try:
                value = _ALLOWED_BINARY[type(node.op)](left, right)
            except OverflowError as error:
                raise ExpressionTooLargeError("the result is too large") from error
            if isinstance(node.op, ast.Pow) and value == 0 and left != 0:
                raise ExpressionTooLargeError("the result is too small to represent")
            return check(value)
        raise UnsafeExpressionError(f"'{type(node).__name__}' is not allowed in an arithmetic expression")

    return walk(tree)


def _has_operation(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.BinOp) for node in ast.walk(tree))


@component
class DirectAnswerer(ChatGeneratorSerialization):
    """
    Answers without retrieval, for the intent gate's `direct` route (seed 000's `skip_retrieval`).

    In order: a safe arithmetic evaluation when the whole question is arithmetic ("What is 12 * 7?" ->
    "12 * 7 = 84."; words such as "plus", "times", "divided by" work; only `arithmetic_prefixes` and
    `arithmetic_suffixes` may surround the expression, so "How would one write T(n) = 7n2 + 15n + 40 in big O
    notation?" is not arithmetic); a short polite reply to greetings, thanks and farewells; otherwise the optional
    general `chat_generator`, and with none configured an honest reply that no general model is set up (status
    `"partial"`), never an invented answer. Sets `answer`, `status`, `citations` (`[]`), `generator`
    (`"arithmetic"` | `"greeting"` | `"llm"` | `"none"`) and appends `direct_answer` to the path.

    Usage:
    ```python
    from gatehouse.components.generators.direct_answerer import DirectAnswerer
    from gatehouse.components.state import new_state

    answerer = DirectAnswerer()
    answerer.run(state=new_state("What is 12 * 7?"))["state"]["answer"]   # "12 * 7 = 84."
    ```
    """

    def __init__(
        self,
        *,
        operator_words: dict[str, str] | None = None,
        arithmetic_prefixes: list[str] | None = None,
        arithmetic_suffixes: list[str] | None = None,
        max_exponent: float = 1000,
        max_result_digits: int = 100,
        max_expression_chars: int = 200,
        significant_digits: int = 12,
        arithmetic_template: str = "{expression} = {result}.",
        division_by_zero_message: str = "{expression} is undefined: division by zero.",
        too_large_message: str = "{expression} is outside the range I can calculate here.",
        greeting_patterns: list[str] | None = None,
        thanks_patterns: list[str] | None = None,
        farewell_patterns: list[str] | None = None,
        max_greeting_words: int = 6,
        greeting_message: str = DEFAULT_GREETING_MESSAGE,
        thanks_message: str = DEFAULT_THANKS_MESSAGE,
        farewell_message: str = DEFAULT_FAREWELL_MESSAGE,
        no_model_message: str = DEFAULT_NO_MODEL_MESSAGE,
        llm_error_message: str = DEFAULT_LLM_ERROR_MESSAGE,
        chat_generator: Any = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_history_turns: int = 4,
    ) -> None:
        """
        :param operator_words: Words or symbols replaced by operators before parsing (longest first); None uses
            the defaults ("plus", "times", "divided by", "to the power of", "×", "^", ...).
        :param arithmetic_prefixes: Phrases (case-insensitive) that may open an arithmetic question ("what is",
            "calculate", ...); None uses the defaults. Any other word around the expression means the question is
            not arithmetic.
        :param arithmetic_suffixes: Phrases that may close an arithmetic question ("equal", "make"); None uses the
            defaults.
        :param max_exponent: Largest absolute exponent allowed.
        :param max_result_digits: Largest number of digits of any result.
        :param max_expression_chars: Longer expressions are not evaluated.
        :param significant_digits: Significant digits of non-integer results.
        :param arithmetic_template: Answer template; `{expression}` and `{result}` are replaced.
        :param division_by_zero_message: Answer for a division by zero; `{expression}` is replaced.
        :param too_large_message: Answer when the bounds are exceeded; `{expression}` is replaced.
        :param greeting_patterns: Regexes (case-insensitive, matched at the start of the message); None = defaults.
        :param thanks_patterns: Regexes for thanks; None = defaults.
        :param farewell_patterns: Regexes for farewells; None = defaults.
        :param max_greeting_words: Messages longer than this are never treated as greetings, thanks or farewells.
        :param greeting_message: Reply to a greeting (says what the assistant can help with).
        :param thanks_message: Reply to thanks.
        :param farewell_message: Reply to a farewell.
        :param no_model_message: Honest reply when no general model is configured.
        :param llm_error_message: Honest reply when the general model fails.
        :param chat_generator: Optional Haystack chat generator for general questions; None (default) disables it.
        :param system_prompt: System prompt for the general model.
        :param max_history_turns: Earlier user/assistant pairs passed to the general model.
        """
        self.operator_words = operator_words
        self.arithmetic_prefixes = arithmetic_prefixes
        self.arithmetic_suffixes = arithmetic_suffixes
        self.max_exponent = max_exponent
        self.max_result_digits = max_result_digits
        self.max_expression_chars = max_expression_chars
        self.significant_digits = significant_digits
        self.arithmetic_template = arithmetic_template
        self.division_by_zero_message = division_by_zero_message
        self.too_large_message = too_large_message
        self.greeting_patterns = greeting_patterns
        self.thanks_patterns = thanks_patterns
        self.farewell_patterns = farewell_patterns
        self.max_greeting_words = max_greeting_words
        self.greeting_message = greeting_message
        self.thanks_message = thanks_message
        self.farewell_message = farewell_message
        self.no_model_message = no_model_message
        self.llm_error_message = llm_error_message
        self.chat_generator = chat_generator
        self.system_prompt = system_prompt
        self.max_history_turns = max_history_turns

        words = DEFAULT_OPERATOR_WORDS if operator_words is None else operator_words
        self._operator_words = [
            (re.compile(rf"(?<!\w){re.escape(word)}(?!\w)" if word[:1].isalnum() else re.escape(word), re.I), symbol)
            for word, symbol in sorted(words.items(), key=lambda item: -len(item[0]))
        ]

        def phrases(values: list[str] | None, defaults: list[str]) -> str:
            words = [r"\s+".join(map(re.escape, p.split())) for p in (defaults if values is None else values)]
            return "|".join(words) or "(?!)"

        prefixes = phrases(arithmetic_prefixes, DEFAULT_ARITHMETIC_PREFIXES)
        suffixes = phrases(arithmetic_suffixes, DEFAULT_ARITHMETIC_SUFFIXES)
        self._prefix = re.compile(rf"^\s*(?:{prefixes})\b[\s,:]*", re.I)
        self._suffix = re.compile(rf"(?<!\w)(?:{suffixes})\s*$", re.I)

        def compile_all(patterns: list[str] | None, defaults: list[str]) -> list[re.Pattern[str]]:
            return [re.compile(p, re.IGNORECASE) for p in (defaults if patterns is None else patterns)]

        self._social = [
            (compile_all(thanks_patterns, DEFAULT_THANKS_PATTERNS), "thanks_message"),
            (compile_all(farewell_patterns, DEFAULT_FAREWELL_PATTERNS), "farewell_message"),
            (compile_all(greeting_patterns, DEFAULT_GREETING_PATTERNS), "greeting_message"),
        ]

    def warm_up(self) -> None:
        """Warm up the optional chat generator."""
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def find_expression(self, question: str) -> str | None:
        """
        The arithmetic expression that makes up the whole question, if it has at least one operation.

        :param question: E.g. `"What is 12 times 7?"`.
        :returns: The expression text (`"12 * 7"`), or None when the question is anything but arithmetic
            (words other than the prefixes, suffixes and operator words, or no operation).
        """
        text = question.replace("\u2019", "'").strip()
        while (prefix := self._prefix.match(text)) and prefix.end() > 0:
            text = text[prefix.end() :]
        text = self._suffix.sub("", re.sub(r"[\s?!=]+$", "", text)).rstrip(" ?!=")
        text = re.sub(r"(\d+(?:\.\d+)?)\s*%\s*of\s+(?=[\d(])", r"(\1 / 100) * ", text, flags=re.I)
        for pattern, symbol in self._operator_words:
            text = pattern.sub(f" {symbol} ", text)
        text = re.sub(r"(?<=\d)\s*[xX]\s*(?=\d)", " * ", text)
        text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
        candidate = text.strip().rstrip(".").strip()
        if (
            not _EXPRESSION_RE.fullmatch(candidate)
            or not re.search(r"\d", candidate)
            or len(candidate) > self.max_expression_chars
        ):
            return None
        try:
            tree = ast.parse(candidate, mode="eval")
        except SyntaxError:
            return None
        return candidate if _has_operation(tree) else None

    def _format(self, value: int | float) -> str:
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        if isinstance(value, float):
            return format(value, f".{self.significant_digits}g")
        return str(value)

    def _arithmetic(self, question: str) -> tuple[str, str] | None:
        expression = self.find_expression(question)
        if expression is None:
            return None
        shown = ast.unparse(ast.parse(expression, mode="eval"))
        try:
            value = evaluate_arithmetic(
                expression, max_exponent=self.max_exponent, max_result_digits=self.max_result_digits
            )
        except ZeroDivisionError:
            return self.division_by_zero_message.replace("{expression}", shown), "success"
        except ExpressionTooLargeError:
            return self.too_large_message.replace("{expression}", shown), "partial"
        except UnsafeExpressionError:
            return None
        answer = self.arithmetic_template.replace("{expression}", shown).replace("{result}", self._format(value))
        return answer, "success"

    def _social_reply(self, question: str) -> str | None:
        text = " ".join(re.sub(r"[^\w\s']", " ", question).split())
        if not text or len(text.split()) > self.max_greeting_words:
            return None
        for patterns, message in self._social:
            if any(p.search(text) for p in patterns):
                return getattr(self, message)
        return None

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Answer the question directly.

        :param state: The request state; reads `original_query` (or `query`) and `history`.
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
                    self.chat_generator, question, system_prompt=self.system_prompt, history=history
                )
                status, generator = "success", "llm"
            except Exception as error:  # noqa: BLE001 - a failing model gets an honest reply, never a crash
                answer, status, generator = self.llm_error_message, "partial", "none"
                warning = f"direct_answerer: general model failed ({type(error).__name__}: {error})"
        else:
            answer, status, generator = self.no_model_message, "partial", "none"

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
