"""Where the time goes: intervals of wall time by what this process was waiting on (a server's start, the
policy's rollouts, the judge, the generator, a training step), so a run can say what its stages spent their
seconds on and how much of each stage was none of these (`breakdown`).

Work of one kind often runs concurrently (a step's 16 rollouts): a kind's time is the union of its intervals,
never their sum, so no kind counts more than the wall time. Kinds overlap each other too (judging while
rollouts go on), so the kinds of one stage can add up to more than its wall; `other` is the wall time during
which none ran (the process's own work: tokenizing, writing artifacts, waiting for a lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Literal

Kind = Literal["server starts", "policy", "judge", "generator", "training"]
KINDS: tuple[Kind, ...] = ("server starts", "policy", "judge", "generator", "training")
OTHER = "other"
"""The wall time of a window during which no kind ran."""

KEPT = 200_000
"""Intervals kept (the newest; a few MB): a long-lived process (`autorl serve`) forgets the oldest."""

_intervals: list[tuple[str, float, float]] = []
_lock = threading.Lock()


def record(kind: Kind, start: float, end: float) -> None:
    """One interval of `kind`, in `time.monotonic()` seconds."""
    with _lock:
        _intervals.append((kind, start, end))
        if len(_intervals) > KEPT:
            del _intervals[: KEPT // 2]


@contextmanager
def activity(kind: Kind) -> Iterator[None]:
    """Record the time spent in the block as `kind` (also when it raises)."""
    start = time.monotonic()
    try:
        yield
    finally:
        record(kind, start, time.monotonic())


def _covered(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of `spans`."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def breakdown(
    start: float, end: float | None = None, more: Iterable[tuple[Kind, float, float]] = ()
) -> dict[str, float]:
    """Seconds of each kind between `start` and `end` (now when None), and `OTHER`, rounded to 0.1 s; kinds
    that did not run are left out. `more`: intervals recorded elsewhere (the judge's and the generator's
    requests, from their `ruler.calls.CallRecord`s). Intervals still open (a rollout in flight) are not counted."""
    end = time.monotonic() if end is None else end
    with _lock:
        every = [*_intervals, *more]
    clipped = [(kind, max(s, start), min(e, end)) for kind, s, e in every if e > start and s < end]
    seconds = {kind: _covered([(s, e) for k, s, e in clipped if k == kind]) for kind in KINDS}
    result = {kind: round(value, 1) for kind, value in seconds.items() if value > 0}
    result[OTHER] = round(max(end - start - _covered([(s, e) for _, s, e in clipped]), 0.0), 1)
    return result
