"""Stage `system_prompt`: the policy's system prompt, written by the generator from the task, or the
task's own `system_prompt` as written (no model call, no server).

A generated prompt that fails the checks (`autorl.inputs.checks.system_prompt_problem`) is replaced by the
task description; the artifact and the summary then record the reason as `fallback` (null otherwise).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from autorl.inputs.generation import WrittenSystemPrompt, generate_system_prompt
from autorl.progress import waiting
from autorl.task import TaskSpec

if TYPE_CHECKING:  # for annotations only: this stage's key does not cover the trainer's code
    from ..config import RunConfig
    from ..context import RunArtifacts, StageContext

NAME = "system_prompt"
UPSTREAM: tuple[str, ...] = ()
FILE = "system_prompt.json"


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    if task.system_prompt is not None:
        return {"given": task.system_prompt}
    return {"description": task.description, "generator": config.generator, "seed": config.seed}


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
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        (out / FILE).write_text(json.dumps({"system_prompt": written.text, "fallback": written.fallback}))
    return {"chars": len(written.text), "generator_calls": calls, "fallback": written.fallback}


def load(ctx: RunArtifacts) -> str:
    """The system prompt in this stage's artifact."""
    return json.loads((ctx.artifact(NAME) / FILE).read_text())["system_prompt"]
