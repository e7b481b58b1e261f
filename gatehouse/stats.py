"""Small statistics shared by the benchmarks and the evaluation (no numpy needed)."""


def percentile(values: list[float], share: float) -> float:
    """
    The `share` quantile (0-1) of the values by linear interpolation between the closest ranks.

    Usage: `percentile([10.0, 20.0, 30.0], 0.5)` is `20.0`.
    """
    ordered = sorted(values)
    position = (len(ordered) - 1) * share
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
