"""
The answerability gate's scoring model: a logistic regression of "this answer unit holds the answer" on the unit's
signals (`gatehouse.components.routers.answerability_signals`).

`gatehouse bench answerability --fit` fits `weights` and `bias` and chooses the thresholds; it prints them as the
gate's YAML settings.

Usage:
```python
from gatehouse.components.routers.answerability_model import DEFAULT_BIAS, DEFAULT_WEIGHTS, logistic_score

logistic_score({"coverage": 1.0, "cosine": 0.8}, DEFAULT_WEIGHTS, DEFAULT_BIAS)   # a score in 0..1
```
"""

import math

#: Signal weights, bias and threshold of the logistic model, fitted by `gatehouse bench answerability --fit` on SQuAD
#: 2.0's tune articles (never the report articles). SQuAD paragraphs have no section headings, so `heading_coverage`
#: cannot be fitted there: its weight is set by hand for structured documentation.
DEFAULT_WEIGHTS: dict[str, float] = {
    "coverage": 2.446,
    "window_coverage": 1.728,
    "passage_coverage": -0.866,
    "heading_coverage": 2.0,
    "missing_entity": -0.121,
    "type_missing": -1.555,
    "negation_mismatch": 0.08,
    "antonym": -1.121,
    "cosine": 3.318,
    "novelty": 0.682,
    "bigram_coverage": 0.832,
    "passage_score": 3.869,
    "kind_fit": 1.5,
}
DEFAULT_BIAS = -9.908
DEFAULT_THRESHOLD = 0.066
SIGNALS = tuple(DEFAULT_WEIGHTS)


def check_weights(weights: dict[str, float] | None) -> None:
    """
    Check that a mapping of weights names only known signals.

    :param weights: Weight by signal name, or None (the built-in fit).
    :raises ValueError: On a name that is not in `SIGNALS`.
    """
    unknown = set(weights or {}) - set(SIGNALS)
    if unknown:
        raise ValueError(f"Unknown answerability signals {sorted(unknown)}; use {', '.join(SIGNALS)}.")


def logistic_score(signals: dict[str, float], weights: dict[str, float] | None, bias: float) -> float:
    """
    The model's score of one candidate's signals.

    :param signals: Signal values by name; a signal left out counts 0.
    :param weights: Weight by signal name; None uses `DEFAULT_WEIGHTS`; a signal left out weighs 0.
    :param bias: The intercept.
    :returns: A score in 0..1.
    """
    weights = DEFAULT_WEIGHTS if weights is None else weights
    z = bias + sum(float(weights.get(name, 0.0)) * float(signals.get(name, 0.0)) for name in SIGNALS)
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))
