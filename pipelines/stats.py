"""Statistics for reports and benchmarks: means with bootstrap confidence intervals."""

from __future__ import annotations

import numpy as np


def mean_ci(
    values: list[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean and percentile-bootstrap confidence interval (low, high); a single value is its own interval."""
    if not values:
        raise ValueError("no values")
    data = np.asarray(values, dtype=float)
    if len(data) == 1:
        return float(data[0]), float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    means = rng.choice(data, size=(resamples, len(data)), replace=True).mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(data.mean()), float(low), float(high)
