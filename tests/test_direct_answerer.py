import re
from copy import deepcopy

import pytest
from haystack.components.generators.chat import OpenAIChatGenerator

from gatehouse.components.generators.arithmetic import (
    ExpressionTooLargeError,
    UnsafeExpressionError,
    evaluate_arithmetic,
)
from gatehouse.components.generators.direct_answerer import DEFAULT_NO_MODEL_MESSAGE, DirectAnswerer
from gatehouse.components.state import new_state


@pytest.fixture(scope="module")
def answerer():
    return DirectAnswerer()


def answer(component, question, **fields):
    return component.run(state=new_state(question, **fields))["state"]


def unreachable_generator():
    return OpenAIChatGenerator(api_base_url="http://127.0.0.1:9/v1", model="local", max_retries=0, timeout=2.0)


def test_init():
    component = DirectAnswerer()
    assert component.chat_generator is None
    assert component.limits["max_exponent"] == 1000
    assert component.messages["no_model"] == DEFAULT_NO_MODEL_MESSAGE
    assert component.arithmetic == {"operator_words": None, "prefixes": None, "suffixes": None}

    custom = DirectAnswerer(limits={"max_exponent": 10}, messages={"greeting": "Hi! Ask me about billing."})
    assert custom.limits["max_exponent"] == 10
    assert custom.messages["greeting"] == "Hi! Ask me about billing."
    assert custom.limits["max_result_digits"] == 100  # a key left out keeps its default


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limits": {"max_exponents": 10}}, r"'limits' has .*max_exponents"),
        ({"arithmetic": {"arithmetic_prefixes": ["what is"]}}, r"'arithmetic' has no setting 'arithmetic_prefixes'"),
        ({"messages": "Hello"}, "'messages' must be a mapping"),
        ({"social_patterns": {"greeting": "^hi"}}, "'social_patterns.greeting' must be a list"),
        ({"social_patterns": {"thanks": ["(thanks"]}}, "'social_patterns.thanks' holds an invalid regular expression"),
    ],
)
def test_init_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DirectAnswerer(**kwargs)


def test_to_dict():
    data = DirectAnswerer(
        limits={"max_exponent": 50}, messages={"thanks": "Anytime."}, arithmetic={"prefixes": ["what is"]}
    ).to_dict()
    assert data["type"] == "gatehouse.components.generators.direct_answerer.DirectAnswerer"
    params = data["init_parameters"]
    assert params["limits"]["max_exponent"] == 50
    assert params["messages"]["thanks"] == "Anytime."
    assert params["arithmetic"] == {"operator_words": None, "prefixes": ["what is"], "suffixes": None}
    assert params["chat_generator"] is None
    assert params["messages"]["no_model"] == DEFAULT_NO_MODEL_MESSAGE


def test_from_dict(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    original = DirectAnswerer(chat_generator=unreachable_generator(), system_prompt="Be brief.")
    data = original.to_dict()
    assert data["init_parameters"]["chat_generator"]["type"].endswith("OpenAIChatGenerator")
    restored = DirectAnswerer.from_dict(data)
    assert isinstance(restored.chat_generator, OpenAIChatGenerator)
    assert restored.system_prompt == "Be brief."
    assert restored.to_dict() == data

    plain = DirectAnswerer.from_dict(
        {"type": "gatehouse.components.generators.direct_answerer.DirectAnswerer",
         "init_parameters": {"limits": {"max_exponent": 5}, "arithmetic": {"suffixes": ["equals"]}}}
    )
    assert plain.limits["max_exponent"] == 5 and plain.chat_generator is None
    assert plain.arithmetic["suffixes"] == ["equals"]


def test_from_dict_names_the_new_place_of_a_moved_setting():
    """A YAML written before the settings were grouped fails with the new place of each setting it uses."""
    data = {"type": "gatehouse.components.generators.direct_answerer.DirectAnswerer",
            "init_parameters": {"max_exponent": 5, "greeting_patterns": ["^hi"], "arithmetic_template": "{result}",
                                "no_model_message": "No.", "arithmetic_prefixes": ["what is"], "operator_words": {}}}
    with pytest.raises(ValueError) as raised:
        DirectAnswerer.from_dict(data)
    message = str(raised.value)
    for old, new in [("max_exponent", "limits.max_exponent"), ("greeting_patterns", "social_patterns.greeting"),
                     ("arithmetic_template", "messages.arithmetic"), ("no_model_message", "messages.no_model"),
                     ("arithmetic_prefixes", "arithmetic.prefixes"), ("operator_words", "arithmetic.operator_words")]:
        assert re.search(rf"\W{old}\W.*\W{re.escape(new)}\W", message), (old, message)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What is 12 * 7?", "12 * 7 = 84."),
        ("what's 12 times 7", "12 * 7 = 84."),
        ("What is 100 divided by 8?", "100 / 8 = 12.5."),
        ("Calculate (2 + 3) * -4", "(2 + 3) * -4 = -20."),
        ("What is 2 to the power of 10?", "2 ** 10 = 1024."),
        ("17 // 5?", "17 // 5 = 3."),
        ("compute 17*3", "17 * 3 = 51."),
        ("what's 2^10", "2 ** 10 = 1024."),
        ("What does 6 * 7 equal?", "6 * 7 = 42."),
        ("Please calculate 2 + 2.", "2 + 2 = 4."),
        ("What is 10 mod 3?", "10 % 3 = 1."),
        ("What is 0.1 + 0.2?", "0.1 + 0.2 = 0.3."),
        ("7/3?", "7 / 3 = 2.33333333333."),
        ("What is 1,000 + 2,500?", "1000 + 2500 = 3500."),
        ("What is 15% of 200?", "15 / 100 * 200 = 30."),
        ("5 × 6 − 1", "5 * 6 - 1 = 29."),
        ("What is 9 minus 12 plus 1?", "9 - 12 + 1 = -2."),
    ],
)
def test_run_arithmetic(answerer, question, expected):
    out = answer(answerer, question)
    assert out["answer"] == expected
    assert out["status"] == "success"
    assert out["generator"] == "arithmetic"
    assert out["citations"] == []
    assert out["path"] == ["start", "direct_answer"]
    assert "direct_answerer" in out["latency_ms"]


@pytest.mark.parametrize(
    "question",
    [
        "How would one write T(n) = 7n2 + 15n + 40 in big O notation?",
        "What does error code 502-3 mean?",
        "Is 2 + 2 = 4 in every number system?",
        "17 // 5 and 17 % 5?",
        "What is 42?",
        "Between 1990 and 2000, what was the population of Warsaw?",
    ],
)
def test_run_digits_in_a_question_are_not_arithmetic(answerer, question):
    assert answerer.find_expression(question) is None
    out = answer(answerer, question)
    assert out["generator"] == "none"
    assert out["answer"] == DEFAULT_NO_MODEL_MESSAGE
    assert "=" not in out["answer"]


def test_run_arithmetic_prefixes_from_yaml():
    component = DirectAnswerer(arithmetic={"prefixes": ["wie viel ist"], "suffixes": []})
    assert answer(component, "Wie viel ist 3 * 4?")["answer"] == "3 * 4 = 12."
    assert answer(component, "What is 3 * 4?")["generator"] == "none"


def test_run_division_by_zero(answerer):
    for question in ("What is 1/0?", "What is 5 % 0?", "10 divided by 0"):
        out = answer(answerer, question)
        assert out["generator"] == "arithmetic"
        assert "division by zero" in out["answer"]
        assert "=" not in out["answer"]


def test_run_huge_exponents_are_refused(answerer):
    for question in ("what is 9**9**9?", "What is 2 ** 100000?", "10 ** -400"):
        out = answer(answerer, question)
        assert out["generator"] == "arithmetic"
        assert out["status"] == "partial"
        assert "outside the range" in out["answer"]


def test_evaluate_arithmetic_rejects_unsafe_expressions():
    for expression in (
        "__import__('os')",
        "__import__('os').system('ls')",
        "a + 1",
        "'a' * 3",
        "[1] * 3",
        "True + 1",
        "(lambda: 1)()",
        "1 if 1 else 2",
        "().__class__",
        "2 < 3",
    ):
        with pytest.raises(UnsafeExpressionError):
            evaluate_arithmetic(expression)
    with pytest.raises(ExpressionTooLargeError):
        evaluate_arithmetic("2 ** 5000")
    with pytest.raises(ExpressionTooLargeError):
        evaluate_arithmetic("10 ** 50 * 10 ** 60", max_result_digits=100)
    with pytest.raises(ExpressionTooLargeError):
        evaluate_arithmetic("2 ** 20", max_exponent=10)
    with pytest.raises(ZeroDivisionError):
        evaluate_arithmetic("1 // 0")
    with pytest.raises(UnsafeExpressionError):
        evaluate_arithmetic("(-8) ** 0.5")
    assert evaluate_arithmetic("-(3 - 5) ** 2") == -4
    assert evaluate_arithmetic("2 ** -1") == 0.5


def test_run_unsafe_question_is_not_evaluated(answerer):
    out = answer(answerer, "What is __import__('os').system('echo hacked')?")
    assert out["generator"] == "none"
    assert out["answer"] == DEFAULT_NO_MODEL_MESSAGE
    assert "hacked" not in out["answer"]


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("Hi!", "greeting"),
        ("hello there", "greeting"),
        ("Good morning", "greeting"),
        ("¡Hola!", "greeting"),
        ("Thanks a lot!", "thanks"),
        ("thank you", "thanks"),
        ("bye", "farewell"),
        ("What can you do?", "greeting"),
    ],
)
def test_run_greetings(answerer, question, message):
    out = answer(answerer, question)
    assert out["answer"] == answerer.messages[message]
    assert out["generator"] == "greeting"
    assert out["status"] == "success"
    assert out["citations"] == []


def test_greeting_message_says_what_it_can_do(answerer):
    assert "knowledge bases" in answerer.messages["greeting"]


def test_run_long_message_starting_with_hi_is_not_a_greeting(answerer):
    out = answer(answerer, "Hi, what is the capital city of France these days?")
    assert out["generator"] == "none"


def test_run_honest_reply_without_model(answerer):
    out = answer(answerer, "What is the capital of France?")
    assert out["answer"] == DEFAULT_NO_MODEL_MESSAGE
    assert "Paris" not in out["answer"]
    assert out["status"] == "partial"
    assert out["generator"] == "none"
    assert out["citations"] == []
    assert out["path"][-1] == "direct_answer"


def test_run_custom_no_model_message():
    component = DirectAnswerer(messages={"no_model": "No general model here."})
    assert answer(component, "Who wrote Hamlet?")["answer"] == "No general model here."


def test_run_empty_question(answerer):
    out = answer(answerer, "")
    assert out["generator"] == "none"
    assert out["status"] == "partial"


def test_run_llm_failure_is_honest(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    component = DirectAnswerer(chat_generator=unreachable_generator())
    out = answer(component, "What is the capital of France?")
    assert out["answer"] == component.messages["llm_error"]
    assert out["status"] == "partial"
    assert out["generator"] == "none"
    assert any("general model failed" in w for w in out["validation"]["confidence_warnings"])
    # Arithmetic never needs the model.
    assert answer(component, "What is 6 * 7?")["answer"] == "6 * 7 = 42."


def test_run_does_not_mutate_input(answerer):
    for question in ("What is 12 * 7?", "Hi", "What is the capital of France?"):
        state = new_state(question, history=[{"role": "user", "content": "earlier"}])
        snapshot = deepcopy(state)
        answerer.run(state=state)
        assert state == snapshot
