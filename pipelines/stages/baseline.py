"""Stage `baseline`: the base model answers the validation inputs, and the judge scores them."""

from __future__ import annotations

from typing import Any

from autorl.task import TaskSpec

from .. import evaluation
from ..config import RunConfig
from ..records import evaluation as records
from ..records import inputs, system_prompt
from ..records.baseline import NAME, VARIANT
from ..stage_context import StageContext

UPSTREAM = ("inputs", "system_prompt")


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    rollout = config.unaided().rollout.model_dump()  # as the answers are sampled: `--tool-choice` is no part of it
    return {"model": config.model, "rollout": rollout, **evaluation.judged_settings(task, config)}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    prompt = system_prompt.load(ctx)
    base = await ctx.policy.serve_step(0)
    texts = inputs.load(ctx, "val")
    items = [evaluation.answers(ctx, prompt, text, base, VARIANT) for text in texts]
    groups = await evaluation.judged_per_input(ctx, items, "baseline")
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        frame = records.save(out, groups)
    return evaluation.stage_summary(ctx, frame, len(texts))
