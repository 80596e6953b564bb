"""Stage `inputs`: N unique inputs for the task, split into train and validation."""

from __future__ import annotations

import asyncio
from functools import partial

from autorl.inputs import GenerationConfig, generate_inputs, read_inputs_jsonl, write_inputs_jsonl

NAME = "inputs"
UPSTREAM: tuple[str, ...] = ()
FILE = "inputs.jsonl"


def settings(task, config) -> dict:
    return {
        "description": task.description,
        "generator_instructions": task.generator_instructions,
        "seed_examples": task.seed_examples,
        "num_inputs": config.num_inputs or task.num_inputs,
        "generator": config.generator,
        "seed": config.seed,
        "generation": GenerationConfig().model_dump(),
    }


async def run(ctx) -> dict:
    n = ctx.config.num_inputs or ctx.task.num_inputs
    if ctx.config.generator == "embedded":
        await ctx.policy.start()  # the generator then shares the policy's server instead of starting one
    generated = await asyncio.to_thread(
        partial(generate_inputs, ctx.task, n, ctx.config.generator, ctx.config.seed, write_system_prompt=False)
    )
    ctx.calls["generator"] += generated.stats.calls
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        write_inputs_jsonl(generated.inputs, out / FILE)
    stats = generated.stats
    return {
        "inputs": len(generated.inputs),
        "train": len(generated.train),
        "val": len(generated.val),
        "generator_calls": stats.calls,
        "unique_per_call": round(stats.unique_per_call, 3),
        "duplicate_rate": round(stats.duplicate_rate, 3),
        "rejected_junk": stats.rejected_junk,
    }


def load(ctx, split: str) -> list[str]:
    """The inputs of one split ("train" or "val") from this stage's artifact."""
    return [row.input for row in read_inputs_jsonl(ctx.artifact(NAME) / FILE) if row.split == split]
