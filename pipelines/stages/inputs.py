"""Stage `inputs`: N unique inputs for the task, split into train and validation.

With an inputs file (`RunConfig.inputs_file`) the stage makes no model call: it reads the file's inputs,
drops exact duplicates and splits them (`autorl.inputs.files.inputs_from_file`), and its key covers the
file's content and the split settings (seed, validation fraction) instead of the generator's.

A task with `[[mcp_servers]]` and no inputs file takes MCP•RL scenarios from the generator (ART's
`generate_scenarios` question: `autorl.inputs.scenarios`): tasks the agent's tools can accomplish, each input
with its difficulty from 1 to 5; the summary says so (`source`, `difficulties`).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from autorl.agents.tools import Toolbox
from autorl.inputs.files import GeneratedInputs, inputs_file_digest, inputs_from_file, write_inputs_jsonl
from autorl.inputs.generation import GenerationConfig, generate_inputs
from autorl.inputs.scenarios import SETTINGS, SOURCE, difficulties, generate_scenario_inputs
from autorl.progress import progress_bar
from autorl.task import TaskSpec

from ..records.inputs import FILE, NAME

if TYPE_CHECKING:  # for annotations only: this stage's key does not cover the trainer's code
    from ..config import RunConfig
    from ..stage_context import StageContext

UPSTREAM: tuple[str, ...] = ()


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    if config.inputs_file is not None:
        return {
            "inputs_file_sha256": inputs_file_digest(config.inputs_file),
            "seed": config.seed,
            "val_fraction": GenerationConfig().val_fraction,
        }
    return {
        "description": task.description,
        "generator_instructions": task.generator_instructions,
        "seed_examples": task.seed_examples,
        "num_inputs": config.num_inputs or task.num_inputs,
        "generator": config.generator,
        "seed": config.seed,
        "generation": GenerationConfig().model_dump(),
        **task.agent_settings(),  # the generator is shown the tools
        **({"inputs_from": SETTINGS} if task.mcp_servers else {}),  # MCP•RL scenarios
    }


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    config = ctx.config
    if config.inputs_file is not None:
        result = await asyncio.to_thread(inputs_from_file, config.inputs_file, config.seed)
    else:
        if config.generator == "embedded":
            await ctx.policy.start()  # the generator then shares the policy's server instead of starting one
        toolbox = await ctx.policy.toolbox() if ctx.task.has_tools() else None
        result = await generated(ctx.task, config.num_inputs, config.generator, config.seed, toolbox)
    ctx.calls["generator"] += len(result.calls)
    ctx.generator_calls += result.calls
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        write_inputs_jsonl(result.inputs, out / FILE)
    stats = result.stats
    scenarios = config.inputs_file is None and bool(ctx.task.mcp_servers)
    return {
        "inputs": len(result.inputs),
        "train": len(result.train),
        "val": len(result.val),
        "generator_calls": stats.calls,
        "unique_per_call": round(stats.unique_per_call, 3),
        "duplicate_rate": round(stats.duplicate_rate, 3),
        "rejected_junk": stats.rejected_junk,
        **({"source": SOURCE, "unusable_calls": stats.unusable_calls} if scenarios else {}),
        **({"difficulties": difficulties(result.inputs)} if scenarios else {}),
    }


TOOLS_INSTRUCTIONS = (
    "The agent answers with these tools. Write inputs that need them: requests a user would make that "
    "the agent can only serve by calling one or more of the tools, using the kinds of values they take."
)


async def generated(
    task: TaskSpec,
    n: int | None,
    generator: str,
    seed: int,
    toolbox: Toolbox | None,
    config: GenerationConfig | None = None,
    *,
    write_system_prompt: bool = False,
) -> GeneratedInputs:
    """`n` (default: the task's `num_inputs`) inputs for `task` from `generator`, with a bar, the task's tools
    shown to it (`with_tools_shown`): what this stage makes, and what `autorl inputs` prints (it asks for the
    system prompt too, `write_system_prompt`: the prompt the system_prompt stage would write from the task).
    A task with MCP servers gets MCP•RL scenarios of all its tools and its servers' resources instead."""
    n = n or task.num_inputs
    if toolbox is not None and task.mcp_servers:
        resources = [resource for server in toolbox.servers for resource in server.resources]
        make = partial(generate_scenario_inputs, task, list(toolbox.tools.values()), resources)
        bar = progress_bar(f"MCP•RL scenarios from {generator}", n, "scenario")
    else:
        make = partial(generate_inputs, with_tools_shown(task, toolbox))
        bar = progress_bar(f"inputs from {generator}", n, "input")

    def kept(done: int, wanted: int) -> None:
        bar.update(done - bar.n)

    try:
        return await asyncio.to_thread(
            partial(make, n, generator, seed, config, write_system_prompt=write_system_prompt, progress=kept)
        )
    finally:
        bar.close()


def with_tools_shown(task: TaskSpec, toolbox: Toolbox | None) -> TaskSpec:
    """The task with its tools (`toolbox`, opened from the task) described in the generator's instructions (as
    MCP•RL's scenario generation does: names, descriptions, argument schemas, MCP resources), so that the
    inputs need them; the task as is when it has none."""
    if toolbox is None or not task.has_tools():
        return task
    extra = f"{TOOLS_INSTRUCTIONS}\n\n{toolbox.describe()}"
    instructions = f"{task.generator_instructions}\n\n{extra}" if task.generator_instructions else extra
    return task.model_copy(update={"generator_instructions": instructions})
