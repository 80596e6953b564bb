"""Which checkpoints a run keeps: a `KeepPolicy` (ART's latest + best, latest N, every Nth, or all), and the
best step by a metric that `Model.log` or training recorded."""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from dataclasses import dataclass

log = logging.getLogger("autorl")

POLICY_FORMS = "all, or a comma-separated set of latest, latest:N, best and every:N (e.g. latest,best)"
TRAIN_PREFIX = "train/"
"""A metric named `train/<key>` is the training history's `<key>` (`history.jsonl`) unless `Model.log` recorded it."""


@dataclass(frozen=True)
class KeepPolicy:
    """The checkpoints to keep; the newest is always kept (training resumes from it), and so is any that a
    server serves (`ModelBackend.delete_checkpoints`)."""

    everything: bool = False
    """Keep every checkpoint (`all`, the default of a run): nothing is deleted."""
    latest: int = 1
    """The newest this many (`latest:N`; `latest` is 1)."""
    best: bool = False
    """The best by a metric (`best`)."""
    every: int | None = None
    """Every step that is a multiple of this (`every:N`)."""

    @classmethod
    def parse(cls, text: str) -> KeepPolicy:
        """The policy a text names (`POLICY_FORMS`); ValueError naming the part that is not one of them."""
        terms = [term.strip() for term in text.split(",") if term.strip()]
        if terms == ["all"]:
            return cls(everything=True)
        if not terms:
            raise ValueError(f"names no checkpoints to keep; use {POLICY_FORMS}")
        latest, best, every = 1, False, None
        for term in terms:
            name, _, count = term.partition(":")
            if name == "best" and not count:
                best = True
            elif name in ("latest", "every") and (not count or (count.isdigit() and int(count) >= 1)):
                if name == "latest":
                    latest = max(latest, int(count or 1))
                elif count:
                    every = int(count)
                else:
                    raise ValueError(f"{term!r} needs a step count (every:N); use {POLICY_FORMS}")
            else:
                raise ValueError(f"{term!r} is not a checkpoint policy; use {POLICY_FORMS}")
        return cls(latest=latest, best=best, every=every)

    def steps_to_keep(self, steps: list[int], best: int | None) -> set[int]:
        """Of the checkpoints `steps`, those this policy keeps, given the `best` step (None: none known)."""
        if self.everything:
            return set(steps)
        keep = set(sorted(steps)[-self.latest :])
        if self.best and best is not None:
            keep.add(best)
        if self.every is not None:
            keep.update(step for step in steps if step % self.every == 0)
        return keep & set(steps)


def best_step(records: list[dict], metric: str) -> int | None:
    """The step whose records have the highest mean `metric` (ties: the later step); None when no record has it."""
    values: defaultdict[int, list[float]] = defaultdict(list)
    for record in records:
        value = record.get(metric)
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value:  # NaN is no value
            values[record["step"]].append(float(value))
    if not values:
        return None
    return max(values, key=lambda step: (statistics.fmean(values[step]), step))


def best_checkpoint(logged: list[dict], history: list[dict], metric: str, steps: list[int]) -> int | None:
    """The best of the checkpoints `steps` by `metric`: from the records `Model.log` wrote (`logged`); for
    `train/<key>` not logged, from the training history's `<key>`; else, with a warning, by the training
    reward. None when no checkpoint has a value."""
    existing = set(steps)
    mine = [r for r in logged if r.get("step") in existing]
    if (best := best_step(mine, metric)) is not None:
        return best
    trained = [r for r in history if r.get("step") in existing]
    if metric.startswith(TRAIN_PREFIX) and (best := best_step(trained, metric.removeprefix(TRAIN_PREFIX))) is not None:
        return best
    log.warning(
        "no %r was logged for any checkpoint (model.log(..., split=%r)); keeping the best by the training reward "
        "(train/reward) instead",
        metric, metric.partition("/")[0],
    )  # fmt: skip
    return best_step(trained, "reward")
