"""Stage `evaluate`: the latest and the best checkpoint answer the validation inputs, head to head
with the base model's answers from the baseline: one judge call per input scores all of them together,
so the comparison is relative, as RULER is."""

from __future__ import annotations

from .. import evaluation
from . import baseline, inputs, system_prompt, train

NAME = "evaluate"
UPSTREAM = ("inputs", "system_prompt", "baseline", "train")


def settings(task, config) -> dict:
    return {"steps": config.steps, "judge": config.judge, "rubric": task.rubric, "eval_samples": config.eval_samples}


async def run(ctx) -> dict:
    prompt = system_prompt.load(ctx)
    steps = {"latest": ctx.config.steps, "best": train.best_step(ctx)}
    if steps["best"] == steps["latest"]:
        del steps["best"]
    served = {variant: await ctx.policy.serve_step(step) for variant, step in steps.items()}
    base_answers: dict[str, list] = {}
    for group in evaluation.load_groups(ctx.artifact(baseline.NAME)):
        for trajectory in group.trajectories:
            base_answers.setdefault(trajectory.metadata["input"], []).append(trajectory)
    items = []
    for text in inputs.load(ctx, "val"):
        answers = list(base_answers.get(text, []))
        for variant, name in served.items():
            answers += [
                evaluation.tagged(ctx.policy.answer(prompt, text, ctx.config, name), variant)
                for _ in range(ctx.config.eval_samples)
            ]
        items.append(answers)
    groups = await evaluation.judged_groups(ctx, items, "evaluate")
    with ctx.store.write(NAME, ctx.keys[NAME], {"steps": steps}) as out:
        frame = evaluation.save(out, groups)
    summary = evaluation.summarize(frame)
    for variant, step in steps.items():
        summary[variant]["step"] = step
    return summary
