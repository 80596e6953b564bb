"""A scripted model (the edge of the agent loop's unit tests) and the real toolbox of a ready-made task file."""

from __future__ import annotations

from pathlib import Path

from autorl.agents.rollout import Turn
from autorl.agents.tools import Toolbox
from autorl.task import load_task

REPO = Path(__file__).resolve().parents[2]
TASK_FILE = REPO / "pipelines" / "tasks" / "unit_conversion_tool.toml"
TICTACTOE_CELL = REPO / "benchmarks" / "perf" / "learning_tasks" / "tictactoe_cell.toml"
"""Tic-tac-toe with a tool that keeps its board per rollout (`autorl.RolloutState`)."""


def call(name: str, arguments: str, call_id: str = "c1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def scripted(*turns: dict):
    """A model that answers with `turns` in order, recording the messages and tools it was sent."""
    sent: list[tuple[list[dict], list[dict] | None]] = []
    script = iter(turns)

    async def complete(messages, tools):
        sent.append(([dict(m) for m in messages], tools))
        return Turn({"role": "assistant", "content": "", **next(script)}, "stop", 5)

    return complete, sent


async def with_toolbox(body):
    toolbox = await Toolbox.open(load_task(TASK_FILE))
    try:
        return await body(toolbox)
    finally:
        await toolbox.aclose()
