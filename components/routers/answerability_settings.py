"""
The answerability gate's grouped settings (`model`, `rules`, `signals`, `llm`) with their defaults, where its former flat
settings went, and the check of all its settings.

Usage:
```python
from gatehouse.components.routers.answerability_settings import RULES
from gatehouse.components.setting_groups import setting_group

setting_group("rules", {"max_candidates": 3}, RULES)   # every rule, max_candidates 3
```
"""

from typing import Any

from gatehouse.components.routers.answerability_model import DEFAULT_BIAS, check_weights

#: The logistic model that turns a candidate's signals into its score (`answerability_model`), fitted as a whole by
#: `gatehouse bench answerability --fit`: the `weights` of the signals (`SIGNALS`; None: the built-in fit; a signal
#: left out weighs 0) and the `bias` (the intercept).
MODEL: dict[str, Any] = {"weights": None, "bias": DEFAULT_BIAS}

#: The gate's rules beside the score: `require_entities` (a question stating a name or number no passage contains
#: is not answered), `require_type` (units of the expected answer type rank first; a typed question none answers in
#: its type is not answered), `max_candidates` (units handed to the answerer), `skip_statuses` (states passed on
#: unjudged; None means `["fallback"]`).
RULES: dict[str, Any] = {"require_entities": True, "require_type": True, "max_candidates": 5, "skip_statuses": None}

#: The word lists and patterns the signals read (`Lexicon`; None: the built-in English ones).
LEXICON_SETTINGS: dict[str, Any] = {
    "answer_types": None, "type_patterns": None, "negations": None, "antonyms": None, "question_words": None,
    "units": None, "stopwords": None, "abbreviations": None,
}

#: What the signals read: the lexicon, and the embedding model of the `cosine` signal with its cache directory (None:
#: the configured defaults; `"off"`: no cache).
SIGNAL_SETTINGS: dict[str, Any] = {**LEXICON_SETTINGS, "embedding_model": None, "cache_dir": None}

DEFAULT_LLM_PROMPT = (
    "Does the passage answer the question? Answer only yes or no.\n"
    "Question: {question}\n"
    "Passage: {passage}"
)

#: The optional LLM tier: `weight` of its verdict (yes 1, no 0) in a rated candidate's score, its `prompt`
#: (`{question}` and `{passage}` are replaced) and how many of the best `candidates` it rates; once it has rated any,
#: only those are ranked, so a "no" on all of them can refuse the question.
LLM_SETTINGS: dict[str, Any] = {"weight": 0.5, "prompt": DEFAULT_LLM_PROMPT, "candidates": 1}

#: The gate's former flat settings and where each one is now.
MOVED_SETTINGS: dict[str, str] = {
    **{name: f"model.{name}" for name in MODEL},
    **{name: f"rules.{name}" for name in RULES},
    **{name: f"signals.{name}" for name in SIGNAL_SETTINGS},
    **{f"llm_{name}": f"llm.{name}" for name in LLM_SETTINGS},
}


def check_settings(gate: Any) -> None:
    """
    Check an answerability gate's settings (its groups already filled in).

    :param gate: The gate.
    :raises ValueError: On an unknown signal or mode, or a value out of range.
    """
    check_weights(gate.model["weights"])
    if gate.on_unanswerable not in ("fallback", "partial"):
        raise ValueError(f"on_unanswerable must be 'fallback' or 'partial', got '{gate.on_unanswerable}'.")
    if not 0.0 <= gate.threshold <= 1.0:
        raise ValueError("threshold must be between 0 and 1.")
    if gate.success_threshold is not None and not gate.threshold <= gate.success_threshold <= 1.0:
        raise ValueError("success_threshold must be between threshold and 1.")
    if not 0.0 <= gate.llm["weight"] <= 1.0:
        raise ValueError("llm.weight must be between 0 and 1.")
    if gate.rules["max_candidates"] < 1 or gate.llm["candidates"] < 1:
        raise ValueError("rules.max_candidates and llm.candidates must be at least 1.")
