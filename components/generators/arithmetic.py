"""
Safe arithmetic on question text (plain Python, not a component): finding the expression that makes up a whole
question ("What is 12 times 7?" -> `12 * 7`) and evaluating it, for
`gatehouse.components.generators.direct_answerer.DirectAnswerer`.

The expression is parsed with `ast` and only numbers, `+ - * / // % **` (with a bounded exponent and result size),
parentheses and unary signs are evaluated; nothing is ever passed to `eval`.
"""

import ast
import math
import operator
import re

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



def _phrases(values: list[str]) -> str:
    """An alternation of phrases (case-insensitive, any whitespace between words); never matches when empty."""
    return "|".join(r"\s+".join(map(re.escape, phrase.split())) for phrase in values) or "(?!)"


class ExpressionFinder:
    """
    Finds the arithmetic expression that makes up a whole question, with words such as "plus", "times" or
    "divided by" replaced by operators; only the given prefixes and suffixes may surround it.

    ```python
    ExpressionFinder().find("What is 12 times 7?")  # "12 * 7"
    ExpressionFinder().find("How would one write T(n) = 7n2 + 15n + 40 in big O notation?")  # None
    ```
    """

    def __init__(
        self,
        operator_words: dict[str, str] | None = None,
        prefixes: list[str] | None = None,
        suffixes: list[str] | None = None,
        max_chars: int = 200,
    ) -> None:
        """
        Compile the words.

        :param operator_words: Words or symbols replaced by operators (longest first); None uses the defaults.
        :param prefixes: Phrases that may open an arithmetic question; None uses the defaults.
        :param suffixes: Phrases that may close an arithmetic question; None uses the defaults.
        :param max_chars: Longer expressions are not evaluated.
        """
        words = DEFAULT_OPERATOR_WORDS if operator_words is None else operator_words
        self._operator_words = [
            (re.compile(rf"(?<!\w){re.escape(word)}(?!\w)" if word[:1].isalnum() else re.escape(word), re.I), symbol)
            for word, symbol in sorted(words.items(), key=lambda item: -len(item[0]))
        ]
        prefix = _phrases(DEFAULT_ARITHMETIC_PREFIXES if prefixes is None else prefixes)
        suffix = _phrases(DEFAULT_ARITHMETIC_SUFFIXES if suffixes is None else suffixes)
        self._prefix = re.compile(rf"^\s*(?:{prefix})\b[\s,:]*", re.I)
        self._suffix = re.compile(rf"(?<!\w)(?:{suffix})\s*$", re.I)
        self.max_chars = max_chars

    def find(self, question: str) -> str | None:
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
            or len(candidate) > self.max_chars
        ):
            return None
        try:
            tree = ast.parse(candidate, mode="eval")
        except SyntaxError:
            return None
        return candidate if _has_operation(tree) else None


def format_number(value: int | float, significant_digits: int = 12) -> str:
    """
    A result as shown in an answer: integral floats without `.0`, other floats to `significant_digits`.

    :param value: The result.
    :param significant_digits: Significant digits of a non-integral result.
    :returns: The text.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return format(value, f".{significant_digits}g")
    return str(value)
