"""Answer validation inputs, judge each input's answers as one group, and save and summarise the scores."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import pandas as pd

from autorl.trajectories import Trajectory, TrajectoryGroup

from .stats import mean_ci

if TYPE_CHECKING:  # for annotations only: the benchmark's judge key covers this module, not the trainer
    from autorl.task import TaskSpec

    from .config import RunConfig
    from .stage_context import StageContext

SUCCESS = 0.5
"""An answer scored at least this counts as a success (the base model's success rate, a worked example)."""


def judged_settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    """What judged answers to the validation inputs depend on besides the model: the judge, the rubric, the
    answers per input, and the rollouts' tools and turns (part of the baseline's and evaluate's keys)."""
    return {
        **config.judging(),
        "rubric": task.rubric,
        "eval_samples": config.eval_samples,
        **task.agent_settings(),
    }


async def judged_per_input(
    ctx: StageContext, items: list[list[Trajectory | Awaitable[Trajectory]]], desc: str
) -> list[TrajectoryGroup]:
    """One judged group per validation input; each trajectory's `metadata["variant"]` names its source."""
    return await ctx.gather_judged([TrajectoryGroup(answers) for answers in items], desc)


def answers(ctx: StageContext, prompt: str, text: str, name: str, variant: str) -> list[Awaitable[Trajectory]]:
    """`eval_samples` answers of the policy served as `name` to `text`, each tagged with `variant`; unaided:
    `--tool-choice required` is a training aid, so held-out answers choose their tools themselves ("auto")."""
    config = ctx.config.unaided()
    return [_tagged(ctx.policy.answer(prompt, text, config, name), variant) for _ in range(config.eval_samples)]


async def _tagged(answer: Awaitable[Trajectory], variant: str) -> Trajectory:
    trajectory = await answer
    trajectory.metadata["variant"] = variant
    return trajectory


MIN_COVERAGE = 0.8
"""Below this share of validation inputs scored, the report and the run warn that the figures rest on few inputs."""


def stage_summary(
    ctx: StageContext, frame: pd.DataFrame, val_inputs: int, steps: dict[str, int] | None = None
) -> dict[str, Any]:
    """The summary of a stage that judged answers to the validation inputs: `val_inputs` (how many there
    are) and per variant the mean, CI, `inputs` scored and, for checkpoints, `step`. Prints the
    `coverage_warning` when there is one."""
    variants = summarize(frame)
    for variant, step in (steps or {}).items():
        variants.setdefault(variant, {"inputs": 0})["step"] = step
    summary = {"val_inputs": val_inputs, "variants": variants}
    if warning := coverage_warning(summary):
        ctx.console.print(f"[yellow]warning: {warning}[/yellow]", highlight=False)
    return summary


def coverage_warning(summary: dict[str, Any]) -> str | None:
    """A warning when a variant's figure rests on fewer than `MIN_COVERAGE` of the validation inputs."""
    total = summary["val_inputs"]
    short = {v: s["inputs"] for v, s in summary["variants"].items() if s["inputs"] < MIN_COVERAGE * total}
    if not total or not short:
        return None
    scored = ", ".join(f"{variant} {n}" for variant, n in short.items())
    return (
        f"only part of the {total} validation inputs could be scored ({scored}): below {MIN_COVERAGE:.0%}, "
        "these figures rest on too few inputs; see the judge's warnings in the log"
    )


def summarize(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per variant: mean reward over inputs (each input's answers averaged first) and its 95% CI."""
    summary = {}
    for variant, rows in frame.groupby("variant"):
        per_input = rows.groupby("input")["reward"].mean().tolist()
        mean, low, high = mean_ci(per_input)
        summary[str(variant)] = {"mean": mean, "ci_low": low, "ci_high": high, "inputs": len(per_input)}
    return summary
