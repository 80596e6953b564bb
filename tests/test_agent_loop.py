"""The agent loop: tool calls executed and answered until the model stops calling or `max_turns`; tool
problems reach the model as results; a fatal error ends the gathering, other errors stay data.

The model is a scripted `complete` (the edge of the unit); the tools are the real Toolbox over the real
example function `pipelines/tasks/unit_tools.py:convert`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from openai import AsyncOpenAI
from openai.types.chat.chat_completion import Choice

from autorl import Trajectory, TrajectoryGroup, gather_trajectory_groups
from autorl.agents.rollout import RolloutConfig, Turn, agent_rollout, openai_completion
from autorl.errors import McpServerDied
from autorl.trajectories import CONSTRAINED_CHOICES
from tests.helpers.agents import call, scripted, with_toolbox
from tests.helpers.chat_server import ChatCompletionServer, completion

ARGUMENTS = {"value": 2, "from_unit": "km", "to_unit": "m"}


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
        "tool_calls_parsed": 1,
        "tool_calls_recovered": 0,
        "tool_calls_invalid": 0,
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


def test_a_call_the_server_missed_is_read_from_the_text_run_and_shown_as_a_call():
    """A `<tool_call>` block with a misspelled name and a stray closing brace that vLLM's parser left as text:
    run as `convert`, the message rewritten to show the call (its text without it), counted as recovered."""
    block = (
        '<tool_call>\n{"name": "Convert", "arguments": {"value": 2, "from_unit": "km", "to_unit": "m"}}}\n</tool_call>'
    )
    complete, sent = scripted({"content": f"Let me convert.\n{block}"}, {"content": "2 km is 2000 m."})

    async def body(toolbox):
        return await agent_rollout(complete, "system", "How many metres in 2 km?", toolbox=toolbox, max_turns=4)

    trajectory = run(with_toolbox(body))
    asked = trajectory.messages()[2]
    assert asked["content"] == "Let me convert." and asked["tool_calls"][0]["function"]["name"] == "convert"
    assert asked["tool_calls"][0]["id"] == "call_1_0" == trajectory.messages()[3]["tool_call_id"]
    assert "2000" in trajectory.messages()[3]["content"] and sent[1][0][2] == asked
    assert (trajectory.metrics["tool_calls_recovered"], trajectory.metrics["tool_calls_parsed"]) == (1, 0)


def test_a_recovered_call_rewrites_the_choice_but_not_its_sampled_tokens():
    """The policy's `Choice` (what training reads its tokens from) shows the call read from its text; its
    logprobs, the sampled tokens, are untouched."""
    text = 'Use {"name": "convert", "arguments": "{\\"value\\": 1, \\"from_unit\\": \\"km\\", \\"to_unit\\": \\"m\\"}"}'
    logprobs = {"content": [{"token": "token_id:7", "logprob": -0.5, "bytes": None, "top_logprobs": []}]}
    choice = Choice.model_validate(
        {"index": 0, "finish_reason": "stop", "logprobs": logprobs, "message": {"role": "assistant", "content": text}}
    )
    answers = iter([Turn(choice, "stop", 1), Turn({"role": "assistant", "content": "1000 m"}, "stop", 1)])

    async def complete(messages, tools):
        return next(answers)

    async def body(toolbox):
        return await agent_rollout(complete, "system", "1 km in m?", toolbox=toolbox, max_turns=3)

    trajectory = run(with_toolbox(body))
    assert choice.message.content == "Use" and choice.logprobs.content[0].token == "token_id:7"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {
        "value": 1,
        "from_unit": "km",
        "to_unit": "m",
    }
    assert "1000" in trajectory.messages()[3]["content"] and trajectory.metrics["tool_calls_recovered"] == 1


def test_a_call_that_names_no_tool_is_counted_invalid_and_ends_the_rollout():
    complete, sent = scripted({"content": '<tool_call>\n{"name": "translate", "arguments": {}}\n</tool_call>'})

    async def body(toolbox):
        return await agent_rollout(complete, "system", "convert", toolbox=toolbox, max_turns=4)

    trajectory = run(with_toolbox(body))
    assert len(sent) == 1 and trajectory.metrics["tool_calls_invalid"] == 1 and trajectory.metrics["tool_calls"] == 0


def test_tool_choice_required_asks_the_first_turn_for_a_call_and_leaves_later_turns_auto():
    """`RolloutConfig.tool_choice="required"` over a real OpenAI client and HTTP: the request that answers the input
    says "required", the one after the tool result "auto"; the call written as JSON is run."""
    convert = {"name": "convert", "parameters": {"value": 2, "from_unit": "km", "to_unit": "m"}}
    answers = iter([json.dumps([convert]), "2000 m"])
    server = ChatCompletionServer(lambda body: completion(body, next(answers)))

    async def body(toolbox):
        client = AsyncOpenAI(base_url=server.base_url, api_key="k")
        complete = openai_completion(client, "policy", RolloutConfig(tool_choice="required"))
        return await agent_rollout(complete, "system", "2 km in m?", toolbox=toolbox, max_turns=3)

    try:
        trajectory = run(with_toolbox(body))
    finally:
        server.close()
    assert [r["tool_choice"] for r in server.requests] == ["required", "auto"]
    assert "2000" in trajectory.messages()[3]["content"] and trajectory.metrics["tool_calls"] == 1
    assert trajectory.metadata[CONSTRAINED_CHOICES] == [2]  # the forced turn (its logprobs are the grammar's)


def converting(replies: list[dict], strict: bool, max_turns: int) -> Trajectory:
    """A rollout of the convert task over a real OpenAI client, the server answering `replies` in turn."""
    answers = iter(replies)
    server = ChatCompletionServer(lambda body: next(answers))

    async def body(toolbox):
        client = AsyncOpenAI(base_url=server.base_url, api_key="k")
        complete = openai_completion(client, "policy", RolloutConfig(strict_tools=strict))
        return await agent_rollout(complete, "system", "2 km in m?", toolbox=toolbox, max_turns=max_turns)

    try:
        return run(with_toolbox(body))
    finally:
        server.close()


@pytest.mark.parametrize("strict", [False, True])
def test_a_call_of_a_strict_tool_is_a_constrained_turn_and_a_free_one_is_not(strict):
    """Under "auto", a call's arguments are held to a `strict` tool's schema by grammar: that turn is constrained;
    a call of a tool offered without `strict`, and a turn without a call, are sampled freely."""
    called = completion({"model": "policy"}, "")
    called["choices"][0]["message"]["tool_calls"] = [  # the call as vLLM's parser returns it
        {"id": "c1", "type": "function", "function": {"name": "convert", "arguments": json.dumps(ARGUMENTS)}}
    ]
    trajectory = converting([called, completion({"model": "policy"}, "2000 m")], strict, max_turns=3)
    assert trajectory.metrics["tool_calls"] == 1
    assert trajectory.metadata.get(CONSTRAINED_CHOICES) == ([2] if strict else None)


def test_a_strict_call_cut_short_in_the_text_is_a_constrained_turn():
    """A call cut at max_tokens reaches the client as text the server could not parse, but it was sampled under
    the strict tool's grammar from `<tool_call>` on: its logprobs are the grammar's too."""
    cut = completion({"model": "policy"}, '<tool_call>\n{"name": "convert", "arguments": {"value": 2')
    cut["choices"][0]["finish_reason"] = "length"
    assert converting([cut], strict=True, max_turns=1).metadata.get(CONSTRAINED_CHOICES) == [2]
