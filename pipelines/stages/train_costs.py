"""What each training step took, as the train stage records it: a saved group's own cost (`GROUP_COST` in its
metadata), a step's (`STEP_COST` in its directory: its seconds and model calls, its groups made earlier
included) and what training up to a checkpoint took (`training_cost`, which `autorl benchmark`'s cost column
reads). Apart from `train` so the step loop reads on its own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from autorl.training.checkpoints import checkpoint_name

from ..context import RunArtifacts
from .train_sentinel import dropped_step_dirs

STEP_COST = "cost.json"
"""Written into a step's directory when it ends: `seconds` (its rollouts, judging and GRPO update) and
`model_calls` by kind (policy, judge), its groups made earlier included (`step_cost`); `autorl benchmark`'s
cost column adds them up. `spent`: what the step itself spent, tokens and USD (`pipelines.costs.priced`)."""


GROUP_COST = "cost"
"""The metadata key of a saved group's own cost: `seconds` from the start of its answers to its judging's end,
and `model_calls` (policy: its answers, judge: the requests that scored it)."""


def group_cost(path: Path) -> dict[str, Any] | None:
    """What a saved group took (`GROUP_COST` in its metadata; None for a group saved before autorl recorded it)."""
    return json.loads(path.read_text()).get("metadata", {}).get(GROUP_COST)


def step_cost(seconds: float, calls: Counter, made_earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """What a step took (`STEP_COST`): its own seconds and model calls, plus those of its groups made earlier (by
    the preflight stage, or before a crash): their calls added, the longest of their times (made together)."""
    total = Counter(calls)
    for cost in made_earlier:
        total.update(cost["model_calls"])
    earlier_s = max((cost["seconds"] for cost in made_earlier), default=0.0)
    return {"seconds": round(seconds + earlier_s, 2), "model_calls": {k: v for k, v in total.items() if v}}


def training_cost(ctx: RunArtifacts, step: int) -> tuple[int, float] | None:
    """Model calls and seconds that training up to checkpoint `step` took (its steps' `STEP_COST` records, and
    those of the steps rollbacks dropped on the way, as `costs.steps_cost` counts them); None when a step has no
    record (a run trained before autorl wrote them)."""
    work = ctx.policy.run_dir
    calls, seconds = 0, 0.0
    for step_dir in [
        *dropped_step_dirs(work, step),
        *(work / "steps" / checkpoint_name(n) for n in range(1, step + 1)),
    ]:
        if not (path := step_dir / STEP_COST).exists():
            return None
        record = json.loads(path.read_text())
        calls += sum(record["model_calls"].values())
        seconds += record["seconds"]
    return calls, seconds
