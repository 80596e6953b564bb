"""Stage `baseline`: the base model answers the validation inputs, and the judge scores them."""

from __future__ import annotations

from .. import evaluation
from ..context import StageContext
from . import inputs, system_prompt

NAME = "baseline"
UPSTREAM = ("inputs", "system_prompt")
VARIANT = "base"


def settings(task, config) -> dict:
    return {
        "model": config.model,
        "judge": config.judge,
        "rubric": task.rubric,
        "eval_samples": config.eval_samples,
        "rollout": config.rollout.model_dump(),
        **task.agent_settings(),  # the rollouts' tools and turns
    }


async def run(ctx: StageContext) -> dict:
    prompt = system_prompt.load(ctx)
    base = await ctx.policy.serve_step(0)
    texts = inputs.load(ctx, "val")
    items = [evaluation.answers(ctx, prompt, text, base, VARIANT) for text in texts]
    groups = await evaluation.judged_groups(ctx, items, "baseline")
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        frame = evaluation.save(out, groups)
    return evaluation.stage_summary(ctx, frame, len(texts))
