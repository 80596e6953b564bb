"""The agent loop: tool calls executed and answered until the model stops calling or `max_turns`; tool
problems reach the model as results; a fatal error ends the gathering, other errors stay data.

The model is a scripted `complete` (the edge of the unit); the tools are the real Toolbox over the real
example function `pipelines/tasks/unit_tools.py:convert`.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from autorl import TrajectoryGroup, gather_trajectory_groups
from autorl.agents.rollout import agent_rollout
from autorl.errors import McpServerDied
from tests.helpers.agents import call, scripted, with_toolbox


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_tool_call_is_executed_and_its_result_answered():
    convert = json.dumps({"value": 2, "from_unit": "km", "to_unit": "m"})
    complete, sent = scripted({"tool_calls": [call("convert", convert)]}, {"content": "2 km is 2000 m."})

    async def body(toolbox):
        return await agent_rollout(complete, "system", "How many metres in 2 km?", toolbox=toolbox, max_turns=4)

    trajectory = run(with_toolbox(body))
    roles = [m["role"] for m in trajectory.messages()]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    tool_message = trajectory.messages()[3]
    assert tool_message["tool_call_id"] == "c1" and "2000" in tool_message["content"]
    assert trajectory.metrics == {
        "turns": 2,
        "tool_calls": 1,
        "tool_errors": 0,
        "completion_tokens": 10,
        "prompt_tokens": 0,
        "truncated": False,
    }
    assert trajectory.tools and trajectory.tools[0]["function"]["name"] == "convert"
    assert sent[1][0][-1] == tool_message  # the second turn saw the result
    assert sent[0][1] == trajectory.tools


def test_tool_problems_become_results_and_max_turns_ends_the_loop():
    complete, sent = scripted(
        {"tool_calls": [call("no_such_tool", "{}", "a"), call("convert", "{not json", "b")]},
        {"tool_calls": [call("convert", json.dumps({"value": "two"}), "c")]},
        {"content": "never asked for"},
    )

    async def body(toolbox):
        return await agent_rollout(complete, "system", "convert", toolbox=toolbox, max_turns=2)

    trajectory = run(with_toolbox(body))
    results = [m["content"] for m in trajectory.messages() if m["role"] == "tool"]
    assert len(results) == 3 and all(r.startswith("error:") for r in results)
    assert "no_such_tool" in results[0]
    assert trajectory.metrics["turns"] == 2 and trajectory.metrics["tool_errors"] == 3
    assert len(sent) == 2  # max_turns: the third turn was never requested


def test_without_tools_a_rollout_is_one_turn_even_if_the_model_writes_a_call():
    complete, sent = scripted({"content": "hi", "tool_calls": [call("convert", "{}")]})
    trajectory = run(agent_rollout(complete, "system", "hello", max_turns=4))
    assert [m["role"] for m in trajectory.messages()] == ["system", "user", "assistant"]
    assert sent[0][1] is None and trajectory.tools is None


def test_a_fatal_error_ends_the_gathering_and_other_errors_stay_data():
    async def broken() -> None:
        raise ValueError("one rollout failed")

    async def server_gone() -> None:
        raise McpServerDied("MCP server python notes_server.py died a second time")

    groups = run(gather_trajectory_groups([TrajectoryGroup([broken()])], pbar_desc=None, max_exceptions=1))
    assert "one rollout failed" in groups[0].exceptions[0]
    with pytest.raises(McpServerDied):
        run(gather_trajectory_groups([TrajectoryGroup([server_gone()])], pbar_desc=None, max_exceptions=1))
