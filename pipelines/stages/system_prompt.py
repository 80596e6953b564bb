"""Stage `system_prompt`: the policy's system prompt, written by the generator from the task, or the
task's own `system_prompt` as written (no model call, no server).

A generated prompt that fails the checks (`autorl.inputs.checks.system_prompt_problem`) is replaced by the
task description; the artifact and the summary then record the reason as `fallback` (null otherwise).

A generated prompt that passes them must still earn its place (`compare`): where the judge is reliable, the
policy answers `system_prompt_check` training inputs under it and under the task description as the system
prompt, the judge scores each input's answers together (with the system prompt left out, so it judges the
answers alone), and the prompt whose answers score higher is kept (the generated one on a tie). A program
judge counts as reliable (it checks what an answer says, the same way each time); a model judge is
audited on those groups (`ruler.audit_judge`) and the comparison counts only if its verdict is reliable.
Otherwise the artifact says the prompt was not checked, and why; the report shows either.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from typing import TYPE_CHECKING, Any

from autorl.inputs.generation import WrittenSystemPrompt, generate_system_prompt
from autorl.progress import waiting
from autorl.task import TaskSpec
from autorl.trajectories import Trajectory, TrajectoryGroup
from ruler.audit import audit_judge, reads_rubric

from . import inputs

if TYPE_CHECKING:  # for annotations only: this stage's key does not cover the trainer's code
    from ..config import RunConfig
    from ..context import RunArtifacts, StageContext

NAME = "system_prompt"
UPSTREAM: tuple[str, ...] = ("inputs",)  # the check answers training inputs
FILE = "system_prompt.json"


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    if task.system_prompt is not None:
        return {"given": task.system_prompt}
    check = {}
    if config.system_prompt_check:  # what the comparison's answers and scores depend on
        check = {
            "inputs": config.system_prompt_check, "answers": config.eval_samples, "model": config.model,
            **config.judging(), "rubric": task.rubric, "rollout": config.rollout.model_dump(),
            **task.agent_settings(),
        }  # fmt: skip
    return {"description": task.description, "generator": config.generator, "seed": config.seed, "check": check}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    given = ctx.task.system_prompt is not None
    if ctx.config.generator == "embedded" and not given:
        await ctx.policy.start()

    if given:
        written = WrittenSystemPrompt(ctx.task.system_prompt, None)
    else:
        with waiting(f"writing the system prompt with {ctx.config.generator}"):
            written = await asyncio.to_thread(generate_system_prompt, ctx.task, ctx.config.generator, ctx.config.seed)
    calls = len(written.calls)
    ctx.calls["generator"] += calls
    ctx.generator_calls += written.calls
    if written.fallback:
        ctx.console.print(f"system_prompt: generated prompt unusable ({written.fallback}); using the task description")
    check = await compare(ctx, written.text) if not given and not written.fallback else None
    text = ctx.task.description if check and check.get("kept") == "task" else written.text
    if check:
        ctx.console.print(f"system_prompt: {check_line(check)}", highlight=False)
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        (out / FILE).write_text(json.dumps({"system_prompt": text, "fallback": written.fallback, "check": check}))
    return {"chars": len(text), "generator_calls": calls, "fallback": written.fallback, "check": check}


async def compare(ctx: StageContext, generated: str) -> dict[str, Any]:
    """The generated system prompt against the task description as the system prompt: `eval_samples` answers
    under each to `system_prompt_check` training inputs, each input's answers judged together without their
    system prompt. `checked`, and either the mean `scores` per prompt and which was `kept` (and for a model
    judge its audit `verdict`), or `why` it was not checked."""
    config = ctx.config
    if not config.system_prompt_check:
        return {"checked": False, "why": "the check is off (--system-prompt-check 0)"}
    prompts = {"generated": generated, "task": ctx.task.description}
    texts = inputs.load(ctx, "train")[: config.system_prompt_check]
    await ctx.policy.start()

    async def answer(name: str, text: str) -> Trajectory:
        trajectory = await ctx.policy.answer(prompts[name], text, config)
        trajectory.metadata["system_prompt"] = name
        items = trajectory.messages_and_choices
        if items and isinstance(items[0], dict) and items[0].get("role") == "system":  # judged on the answers
            trajectory.messages_and_choices = items[1:]
        return trajectory

    groups = [TrajectoryGroup(answer(n, t) for n in prompts for _ in range(config.eval_samples)) for t in texts]
    judged = [g for g in await ctx.gather_judged(groups, "system prompt check") if g.trajectories]
    scores = {
        n: [t.reward for g in judged for t in g.trajectories if t.metadata["system_prompt"] == n] for n in prompts
    }
    if not all(scores.values()):
        return {"checked": False, "why": "the judge scored too few of the answers"}
    result: dict[str, Any] = {"checked": True, "inputs": len(judged), "judge": "program"}
    if reads_rubric(ctx.judge):
        audit = await audit_judge(
            ctx.judge,
            [[t.messages() for t in g.trajectories] for g in judged],
            rubric=ctx.rubric,
            task=ctx.task.description,
            scores=[[t.reward for t in g.trajectories] for g in judged],
        )
        if audit.verdict != "reliable":
            return {"checked": False, "why": f"the judge is not reliable on these answers ({audit.verdict})"}
        result["judge"] = "reliable"
    means = {n: round(statistics.fmean(values), 4) for n, values in scores.items()}
    return result | {"scores": means, "kept": "task" if means["task"] > means["generated"] else "generated"}


def check_line(check: dict[str, Any]) -> str:
    """The check in one sentence, for the console and the report."""
    if not check.get("checked"):
        return f"the system prompt was not checked against the task text: {check['why']}"
    kept = "the generated prompt" if check["kept"] == "generated" else "the task text instead"
    return (
        f"checked on {check['inputs']} training inputs ({check['judge']} judge): the generated prompt's answers "
        f"scored {check['scores']['generated']:.3f}, the task text's {check['scores']['task']:.3f}; kept {kept}"
    )


def load(ctx: RunArtifacts) -> str:
    """The system prompt in this stage's artifact."""
    return json.loads((ctx.artifact(NAME) / FILE).read_text())["system_prompt"]


def load_check(ctx: RunArtifacts) -> dict[str, Any] | None:
    """The comparison with the task text (`compare`) in this stage's artifact; None for a prompt given by the
    task or one that fell back to the task text (nothing to compare)."""
    return json.loads((ctx.artifact(NAME) / FILE).read_text()).get("check")
