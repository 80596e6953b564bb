"""A function tool's memory per rollout (`RolloutState`): left out of the schema, the same within one rollout,
a fresh one for the next, even when rollouts run at once; the tic-tac-toe tool that keeps its board with it.

The model is a scripted `complete` (the edge of the unit); the toolbox and the tools are real.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from autorl import RolloutState
from autorl.agents.rollout import agent_rollout
from autorl.agents.tool_schema import signature_schema
from autorl.agents.tool_state import state_parameter
from autorl.agents.tools import Toolbox, load_function
from autorl.errors import AutoRLError
from autorl.task import TaskSpec, ToolSpec, load_task
from examples.tictactoe import play_cell, score
from tests.helpers.agents import TICTACTOE_CELL, call, scripted

COUNTER = '''
from __future__ import annotations  # the annotations are strings: resolved by name
from typing import Annotated

import autorl
from autorl import RolloutState

def count(step: int, memory: RolloutState) -> str:
    """Add `step` to this rollout's total.

    Args:
        step: How much to add.
    """
    memory["total"] = memory.get("total", 0) + step
    return f"{memory.input}: {memory['total']}"

def twice(a: RolloutState, b: RolloutState) -> str:
    return ""

def unresolved(cell: int, game: autorl.RolloutState, note: Missing = None) -> str:  # noqa: F821 (hints fail)
    return ""

def annotated(cell: int, game: Annotated[RolloutState, "the board"]) -> str:
    return ""
'''


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    path = tmp_path / "counter.py"
    path.write_text(COUNTER)
    return path


def test_the_state_parameter_is_not_in_the_schema(counter):
    function = load_function(f"{counter}:count")
    parameters, summary = signature_schema(function)
    assert parameters == {
        "type": "object",
        "properties": {"step": {"type": "integer", "description": "How much to add."}},
        "required": ["step"],
        "additionalProperties": False,
    }
    assert summary == "Add `step` to this rollout's total."
    assert state_parameter(function) == "memory"


@pytest.mark.parametrize("name", ["unresolved", "annotated"])
def test_the_state_parameter_is_found_when_hints_fail_or_carry_metadata(counter, name):
    function = load_function(f"{counter}:{name}")
    parameters, _ = signature_schema(function)
    assert "game" not in parameters["properties"] and "game" not in parameters.get("required", [])
    assert state_parameter(function) == "game"


def test_two_state_parameters_are_refused_at_open(counter):
    task = TaskSpec(description="x", tools=[ToolSpec(name="twice", function=f"{counter}:twice")])
    with pytest.raises(AutoRLError, match=r"twice.*all RolloutState; a tool takes one"):
        asyncio.run(Toolbox.open(task))


def test_each_rollout_keeps_its_own_state_while_they_run_at_once(counter):
    """Two rollouts at once, each calling the tool in two turns: each sees its own running total and its own
    input; a call outside a rollout starts from nothing."""
    task = TaskSpec(description="x", tools=[ToolSpec(name="count", function=f"{counter}:count")])

    async def body():
        async with await Toolbox.open(task) as toolbox:
            rollouts = []
            for user_input, step in (("first", 1), ("second", 10)):
                complete, _ = scripted(
                    {"tool_calls": [call("count", json.dumps({"step": step}), "a")]},
                    {"tool_calls": [call("count", json.dumps({"step": step}), "b")]},
                    {"content": "done"},
                )
                rollouts.append(agent_rollout(complete, "system", user_input, toolbox=toolbox, max_turns=3))
            done = await asyncio.gather(*rollouts)
            alone = await toolbox.call("count", '{"step": 5}')
            shared = RolloutState("mine")
            calls = [await toolbox.call("count", '{"step": 2}', shared) for _ in range(2)]
            return done, alone, calls, shared

    (first, second), alone, calls, shared = asyncio.run(body())
    results = [[m["content"] for m in t.messages() if m["role"] == "tool"] for t in (first, second)]
    assert results == [["first: 1", "first: 2"], ["second: 10", "second: 20"]]
    assert alone == ": 5"
    assert calls == ["mine: 2", "mine: 4"] and shared == {"total": 4}


def test_a_model_cannot_fill_the_state_argument(counter):
    task = TaskSpec(description="x", tools=[ToolSpec(name="count", function=f"{counter}:count")])

    async def body():
        async with await Toolbox.open(task) as toolbox:
            return await toolbox.call("count", '{"step": 1, "memory": {"total": 100}}')

    result = asyncio.run(body())
    assert not result.ok and "invalid arguments" in result


def test_tictactoe_cell_keeps_the_board_and_the_judge_replays_the_same_game():
    """`tictactoe_cell.toml`'s tool knows the board from the input, so a move names only its cell; the game it
    plays is the one the judge replays; a call after the game ended is an error; another rollout (another
    state) starts from the input's board again."""
    task = load_task(TICTACTOE_CELL)
    board = "X.OX.OO.X"  # X wins at 5 (the diagonal 1-5-9)
    user_input = f"Tic-tac-toe: you are X and it is your move. Board: {board}\nCall play with your cell."
    complete, _ = scripted(
        {"tool_calls": [call("play", '{"cell": 2}', "a")]},  # legal, not the win: O completes 3-5-7
        {"tool_calls": [call("play", '{"cell": 5}', "b")]},  # too late
    )

    async def body():
        async with await Toolbox.open(task) as toolbox:
            tools = toolbox.openai_tools()
            return tools, await agent_rollout(complete, "system", user_input, toolbox=toolbox, max_turns=2)

    tools, trajectory = asyncio.run(body())
    assert tools[0]["function"]["parameters"]["properties"].keys() == {"cell"}
    results = [m["content"] for m in trajectory.messages() if m["role"] == "tool"]
    assert results == ["You played 2; O played 5 and won.\nX|X|O\nX|O|O\nO|.|X", "error: the game is over"]
    assert score(trajectory.messages()) == pytest.approx(0.2)  # one legal move, then the opponent won

    game = RolloutState(user_input)
    assert play_cell(5, game) == "You played 5 and won.\nX|.|O\nX|X|O\nO|.|X"
    assert play_cell(2, game) == "error: the game is over"
    assert play_cell(5, RolloutState("no board here")).startswith("error: this game has no board")
    illegal = RolloutState(user_input)
    assert play_cell(1, illegal).endswith("; an illegal move ends the game")  # cell 1 holds an X
    assert play_cell(5, illegal) == "error: the game is over"  # no win after it: the judge's replay stopped too
