"""Stage `baseline`: the base model answers the validation inputs, and the judge scores them."""

from __future__ import annotations

from typing import Any

from autorl.task import TaskSpec
from autorl.trajectories import Trajectory

from .. import evaluation
from ..config import RunConfig
from ..context import StageContext
from ..records.run import RunArtifacts
from . import inputs, system_prompt

NAME = "baseline"
UPSTREAM = ("inputs", "system_prompt")
VARIANT = "base"


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    return {"model": config.model, "rollout": config.rollout.model_dump(), **evaluation.judged_settings(task, config)}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    prompt = system_prompt.load(ctx)
    base = await ctx.policy.serve_step(0)
    texts = inputs.load(ctx, "val")
    items = [evaluation.answers(ctx, prompt, text, base, VARIANT) for text in texts]
    groups = await evaluation.judged_groups(ctx, items, "baseline")
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        frame = evaluation.save(out, groups)
    return evaluation.stage_summary(ctx, frame, len(texts))


def answers_by_input(ctx: RunArtifacts) -> dict[str, list[Trajectory]]:
    """The base model's judged answers in this stage's artifact, by the validation input they answer."""
    answers: dict[str, list[Trajectory]] = {}
    for group in evaluation.load_groups(ctx.artifact(NAME)):
        for trajectory in group.trajectories:
            answers.setdefault(trajectory.metadata["input"], []).append(trajectory)
    return answers
