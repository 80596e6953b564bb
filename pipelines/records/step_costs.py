"""What each training step took, as the train stage records it: a saved group's own cost (`GROUP_COST` in its
metadata), a step's (`STEP_COST` in its directory: its seconds and model calls, its groups made earlier
included) and what training up to a checkpoint took (`training_cost`, which `autorl benchmark`'s cost column
reads); and each step's spending where a user reads it (`step_costs` in run.json, `step_cost_summary` in `autorl
show` and the report, `cost_metrics` in the trackers)."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from autorl.training.checkpoints import checkpoint_name

from .run import RunArtifacts
from .train import dropped_step_dirs, last_step, steps_done

STEP_COST = "cost.json"
"""Written into a step's directory when it ends: `seconds` (its rollouts, judging and GRPO update) and
`model_calls` by kind (policy, judge), its groups made earlier included (`step_cost`); `autorl benchmark`'s
cost column adds them up. `spent`: what the step itself spent, tokens and USD (`pipelines.records.pricing.priced`)."""


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


def step_dirs(work: Path, step: int) -> list[tuple[Path, bool]]:
    """The step directories whose work training up to checkpoint `step` took, in the order trained, each with
    whether a rollback dropped it: those rollbacks dropped on the way (trained, paid for, then trained again),
    then steps 1..`step` (as `steps_cost` counts them)."""
    return [
        *((path, True) for path in dropped_step_dirs(work, step)),
        *((work / "steps" / checkpoint_name(n), False) for n in range(1, step + 1)),
    ]


def priced_steps(work: Path, step: int) -> list[tuple[Path, bool, dict[str, Any]]]:
    """The `step_dirs` of checkpoint `step` whose `STEP_COST` holds `spent` (what the step spent, priced), each
    with whether a rollback dropped it and that `spent`; a step without it (trained before autorl priced steps,
    an SFT warm-up step) is left out."""
    priced = []
    for step_dir, dropped in step_dirs(work, step):
        path = step_dir / STEP_COST
        if path.exists() and "spent" in (record := json.loads(path.read_text())):
            priced.append((step_dir, dropped, record["spent"]))
    return priced


def training_cost(ctx: RunArtifacts, step: int) -> tuple[int, float] | None:
    """Model calls and seconds that training up to checkpoint `step` took (the `STEP_COST` records of its
    `step_dirs`); None when a step has no record (a run trained before autorl wrote them)."""
    calls, seconds = 0, 0.0
    for step_dir, _ in step_dirs(ctx.policy.run_dir, step):
        if not (path := step_dir / STEP_COST).exists():
            return None
        record = json.loads(path.read_text())
        calls += sum(record["model_calls"].values())
        seconds += record["seconds"]
    return calls, seconds


def step_costs(ctx: RunArtifacts) -> list[dict[str, Any]]:
    """What each training step spent, for a user reading a run step by step (run.json's train `step_costs`,
    `autorl show`, the report): `step`, `seconds`, `tokens_total` and `usd_total` of its `STEP_COST`'s `spent`,
    in the order trained (`priced_steps` of the newest checkpoint, as the stage's cost counts them: these add up
    to it), a step a rollback dropped marked `dropped`."""
    return [
        {
            "step": int(step_dir.name), "seconds": spent["seconds"], "tokens_total": spent["tokens_total"],
            "usd_total": spent["usd"]["total"], **({"dropped": True} if dropped else {}),
        }
        for step_dir, dropped, spent in priced_steps(ctx.policy.run_dir, min(steps_done(ctx), last_step(ctx)))
    ]  # fmt: skip


STEP_COST_COLUMNS = ("steps", "seconds", "tokens", "total USD")
"""The columns of `step_cost_summary`'s rows."""

STEP_COST_NOTE = "min, median and max: of each column on its own, not one step's"
"""What `step_cost_summary`'s first rows are, said under them."""


def step_cost_summary(costs: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, str, str]]]:
    """`step_costs` in a few rows that stay short for a run of many steps: a title, and the fewest, median and
    most seconds, tokens and USD over the steps (each column on its own) and the last step's, formatted
    (`STEP_COST_COLUMNS`, `STEP_COST_NOTE`); what `autorl show` and the report print."""
    dropped = sum(1 for cost in costs if cost.get("dropped"))
    again = f", {dropped} of them dropped by a rollback and trained again" if dropped else ""
    title = f"cost per training step ({len(costs)} steps{again})"
    columns = ("seconds", "tokens_total", "usd_total")
    rows = [
        (name, *(pick([cost[column] for cost in costs]) for column in columns))
        for name, pick in (("min", min), ("median", statistics.median), ("max", max))
    ]
    rows.append((f"last (step {costs[-1]['step']})", *(costs[-1][column] for column in columns)))
    return title, [(name, f"{s:.1f}", f"{t:.0f}", f"{usd:.4f}") for name, s, t, usd in rows]


def cost_metrics(spent: dict[str, Any]) -> dict[str, float]:
    """A step's spending (`STEP_COST`'s `spent`) as tracker metrics, beside its reward and loss: `cost/usd`
    (total), `cost/tokens` (every kind) and `cost/seconds`."""
    return {"cost/usd": spent["usd"]["total"], "cost/tokens": spent["tokens_total"], "cost/seconds": spent["seconds"]}


def step_cost_lines(steps: list[dict[str, Any]]) -> list[str]:
    """The cost section's lines on the training steps (`step_costs`): a table of the fewest, median
    and most per step and the last step's (`step_cost_summary`: short however many steps ran); none without a
    priced step."""
    if not steps:
        return []
    title, rows = step_cost_summary(steps)
    return [
        "",
        f"{title[0].upper()}{title[1:]}:",
        "",
        f"| {' | '.join(STEP_COST_COLUMNS)} |",
        "|---|---:|---:|---:|",
        *[f"| {' | '.join(row)} |" for row in rows],
        "",
        f"{STEP_COST_NOTE[0].upper()}{STEP_COST_NOTE[1:]}.",
    ]


def steps_cost(train_dir: Path, steps: int) -> list[dict[str, Any]]:
    """The cost records of training steps 1..`steps` (`spent` in each step's cost file) and of the steps that a
    sentinel rollback dropped on the way there (trained, paid for, then trained again), skipping a step that
    has none (trained before autorl priced steps): `priced_steps`."""
    return [spent for _, _, spent in priced_steps(train_dir, steps)]
