"""Statistics for reports and benchmarks: means with bootstrap confidence intervals, and a paired test of a gain."""

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


EXACT_FLIPS = 16
"""Up to this many paired differences, `sign_flip_p` enumerates every sign pattern; above, it samples them."""


def sign_flip_p(differences: list[float], resamples: int = 100_000, seed: int = 0) -> float:
    """One-sided p-value of a paired gain: how often flipping the signs of the per-input `differences` (each sign
    equally likely when the two variants do not differ: the paired permutation test) gives a mean at least the
    observed one (exact up to `EXACT_FLIPS` differences). Assumes nothing of the differences' distribution; a test that passes at p < alpha passes an
    unchanged model at most alpha of the time. 1.0 for no differences."""
    data = np.asarray(differences, dtype=float)
    if not len(data):
        return 1.0
    if len(data) <= EXACT_FLIPS:
        signs = 1 - 2 * ((np.arange(2 ** len(data))[:, None] >> np.arange(len(data))) & 1)
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(resamples, len(data)))
    at_least = int(np.sum((signs * data).mean(axis=1) >= data.mean() - 1e-12))
    if len(data) <= EXACT_FLIPS:
        return at_least / len(signs)
    return (at_least + 1) / (resamples + 1)  # the observed signs count among the draws: never 0
