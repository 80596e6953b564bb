"""Stage `system_prompt`: the policy's system prompt, written by the generator from the task."""

from __future__ import annotations

import asyncio
import json

from autorl.inputs import generate_system_prompt, generator_lm

NAME = "system_prompt"
UPSTREAM: tuple[str, ...] = ()
FILE = "system_prompt.json"


def settings(task, config) -> dict:
    return {"description": task.description, "generator": config.generator, "seed": config.seed}


async def run(ctx) -> dict:
    if ctx.config.generator == "embedded":
        await ctx.policy.start()

    def write() -> tuple[str, int]:
        lm, _ = generator_lm(ctx.config.generator)
        prompt = generate_system_prompt(ctx.task, lm, ctx.config.seed)
        return prompt, len(lm.history)

    prompt, calls = await asyncio.to_thread(write)
    ctx.calls["generator"] += calls
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        (out / FILE).write_text(json.dumps({"system_prompt": prompt}))
    return {"chars": len(prompt), "generator_calls": calls}


def load(ctx) -> str:
    return json.loads((ctx.artifact(NAME) / FILE).read_text())["system_prompt"]
