"""Stage `evaluate`: the latest and the best checkpoint answer the validation inputs, head to head
with the base model's answers from the baseline: one judge call per input scores all of them together,
so the comparison is relative, as RULER is."""

from __future__ import annotations

from typing import Any

from autorl import gather_trajectory_groups
from autorl.task import TaskSpec
from autorl.training.drift import drift_figures
from autorl.trajectories import Trajectory, TrajectoryGroup

from .. import evaluation, sentinel
from ..config import RunConfig
from ..records import baseline, inputs, system_prompt, train
from ..records import evaluation as records
from ..records.evaluate import NAME
from ..stage_context import MAX_FAILED_ROLLOUTS, StageContext

UPSTREAM = ("inputs", "system_prompt", "baseline", "train")


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    # the model and its training are in the upstream keys (baseline, train)
    return {"steps": config.steps, **evaluation.judged_settings(task, config)}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    prompt = system_prompt.load(ctx)
    steps = {"latest": train.last_step(ctx), "best": train.best_step(ctx)}
    if steps["best"] == steps["latest"]:
        del steps["best"]
    texts = inputs.load(ctx, "val")
    answers: dict[str, list[Trajectory]] = {text: [] for text in texts} | baseline.answers_by_input(ctx)
    # One checkpoint after the other (merged serving holds one at a time); the last one's answers are
    # judged as each input's complete, the others' are gathered first.
    *earlier, (last, last_step) = steps.items()
    for variant, step in earlier:
        name = await ctx.policy.serve_step(step)
        groups = [
            TrajectoryGroup(evaluation.answers(ctx, prompt, text, name, variant), metadata={"input": text})
            for text in texts
        ]
        for group in await gather_trajectory_groups(
            groups, pbar_desc=f"answers {variant}", max_exceptions=MAX_FAILED_ROLLOUTS
        ):
            answers[group.metadata["input"]] += group.trajectories
    name = await ctx.policy.serve_step(last_step)
    items = [answers[text] + evaluation.answers(ctx, prompt, text, name, last) for text in texts]
    groups = await evaluation.judged_per_input(ctx, items, "evaluate")
    drift = await variant_drift(ctx, groups)
    with ctx.store.write(NAME, ctx.keys[NAME], {"steps": steps}) as out:
        frame = records.save(out, groups)
    summary = evaluation.stage_summary(ctx, frame, len(texts), steps)
    summary["drift"] = drift
    for variant, figures in sentinel.evaluation_figures(drift).items():
        gain = summary["variants"].get(variant, {}).get("mean", 0.0) - summary["variants"].get("base", {}).get(
            "mean", 0.0
        )
        if warning := sentinel.evaluation_warning(variant, gain, figures):
            ctx.console.print(f"[yellow]warning: {warning}[/yellow]", highlight=False)
    return summary


async def variant_drift(ctx: StageContext, groups: list[TrajectoryGroup]) -> dict[str, dict[str, float]]:
    """Per variant, how far its judged answers lie from the base model (`autorl.training.drift`): their mean
    log-likelihood per token under the base weights and the KL to the base on them, scored by the policy's
    server serving the base model; the base model's own answers give the reference (and a KL near 0)."""
    trajectories = [t for g in groups for t in g.trajectories]
    scored = await ctx.policy.base_logprobs(trajectories)
    by_variant: dict[str, list] = {}
    for trajectory, (sequence, logprobs) in zip(trajectories, scored, strict=True):
        if logprobs is not None:
            by_variant.setdefault(trajectory.metadata.get("variant", ""), []).append((sequence, logprobs))
    return {
        variant: drift_figures([s for s, _ in pairs], [lp for _, lp in pairs]) for variant, pairs in by_variant.items()
    }
