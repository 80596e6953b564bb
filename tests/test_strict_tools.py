"""`RolloutConfig.strict_tools` against a real vLLM server of the embedded model: with `tool_choice` "required", a
first turn is a call of the offered tool, and with the tool offered `strict` its arguments are what the tool's
schema asks for (vLLM's structured output holds them to it). Without `strict`, the 135M model invents the
arguments' keys (`benchmarks/perf/tool_calls.py` measures how often), so this fails before the option."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
from openai import AsyncOpenAI

from autorl.agents.rollout import RolloutConfig, openai_completion
from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer
from tests.helpers.limits import scaled

PARAMETERS = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "The employee's full name, e.g. 'Jane Doe'."}},
    "required": ["name"],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_extension",
            "description": "Look up an employee's phone extension in the company directory.",
            "parameters": PARAMETERS,
        },
    }
]
QUESTIONS = [
    "What is Ada Park's phone extension?",
    "I need to call Julia Brenner. What is their extension?",
    "Which extension reaches Hugo Brandt?",
    "Give me the phone extension of Nadia Rahman.",
]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_strict_tools_hold_each_call_s_arguments_to_the_tool_s_schema(tmp_path):
    server = VLLMServer(
        resolve_base_model(DEFAULT_BASE_MODEL), "policy", tmp_path / "log", ServerConfig(enforce_eager=True)
    )
    server.start()
    try:
        config = RolloutConfig(tool_choice="required", strict_tools=True, temperature=0)  # greedy: the same each run
        turns = asyncio.run(first_turns(server, config))
    finally:
        server.stop()
    assert len(turns) == len(QUESTIONS) and all(turn.item.message.tool_calls for turn in turns)  # each a call
    calls = [call for turn in turns for call in turn.item.message.tool_calls]
    assert all(turn.constrained for turn in turns)  # training takes their logprobs as unknown
    for call in calls:
        assert call.function.name == "lookup_extension"
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, PARAMETERS)  # the name is there, as a string
        assert arguments["name"].strip(), arguments


async def first_turns(server: VLLMServer, config: RolloutConfig) -> list:
    client = AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, timeout=scaled(120))
    complete = openai_completion(client, "policy", config)
    conversations = [[{"role": "system", "content": "Answer from the company directory."}, {"role": "user", "content": q}]
                     for q in QUESTIONS]  # fmt: skip
    try:
        return await asyncio.gather(*(complete(messages, TOOLS) for messages in conversations))
    finally:
        await client.close()
