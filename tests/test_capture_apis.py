"""Capture scopes record OpenAI's Completions and Responses calls and Anthropic's Messages calls, as they do chat
completions, through httpx, aiohttp and requests, against a real HTTP server on 127.0.0.1 that answers in each
API's shape (JSON, or server-sent events where the request streams): each call joins the same trajectory as the
chat messages it is read as, with its tool calls and logprobs."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import httpx
import pytest
import requests

import autorl as art
from tests.helpers.chat_server import ChatCompletionServer, completion, send_events, send_json

TOKENS = [{"token": "4", "logprob": -0.5, "bytes": [52], "top_logprobs": []}]


def answer(path: str, body: dict) -> tuple[dict, list[dict]]:
    """Each API's answer, as JSON and as the events of its stream."""
    if path.endswith("/responses"):
        if body.get("tools") and isinstance(body["input"], str):
            output = [{"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 2}'}]
        else:
            output = [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "4", "logprobs": TOKENS}],
                }
            ]
        response = {"id": "r1", "object": "response", "status": "completed", "output": output}
        return response, [
            {"type": "response.created", "response": {**response, "output": []}},
            {"type": "response.completed", "response": response},
        ]
    if path.endswith("/messages"):
        message = {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "4"}],
        }
        events = [
            {"type": "message_start", "message": {**message, "content": []}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "4"}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        ]
        if (
            body.get("tools")
            and body["messages"][-1]["role"] == "user"
            and isinstance(body["messages"][-1]["content"], str)
        ):
            message.update(
                stop_reason="tool_use", content=[{"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 2}}]
            )
            events = [
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": "t1", "name": "add", "input": {}},
                },
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"a": 2}'},
                },
                {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
            ]
        return message, events
    choice = {
        "index": 0,
        "text": " 4",
        "finish_reason": "stop",
        "logprobs": {"tokens": [" 4"], "token_logprobs": [-0.5]},
    }
    return {"object": "text_completion", "choices": [choice]}, [{"choices": [choice]}]


class ApiServer(ChatCompletionServer):
    def respond(self, handler, body: dict) -> None:
        whole, events = answer(self.paths[-1], body)
        send_events(handler, events) if body.get("stream") else send_json(handler, 200, whole)


@pytest.fixture(scope="module")
def server():
    api = ApiServer(lambda body: completion(body, "unused"))
    yield api
    api.close()


RESPONSES_TOOLS = [{"type": "function", "name": "add", "parameters": {"type": "object"}}]
ANTHROPIC_TOOLS = [{"name": "add", "input_schema": {"type": "object"}}]


def calls(stream: bool) -> list[tuple[str, dict]]:
    """An agent's calls: a Completions call, a Responses tool call and its result, an Anthropic one likewise."""
    responses = {"model": "m", "instructions": "Add.", "tools": RESPONSES_TOOLS, "stream": stream}
    anthropic = {"model": "m", "max_tokens": 9, "system": "Add.", "tools": ANTHROPIC_TOOLS, "stream": stream}
    question = {"role": "user", "content": "2+2?"}
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 2}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "4"}]}
    call = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 2}'}
    output = {"type": "function_call_output", "call_id": "c1", "output": "4"}
    return [
        ("/completions", {"model": "m", "prompt": "2+2=", "stream": stream}),
        ("/responses", {**responses, "input": "2+2?"}),
        ("/responses", {**responses, "input": [question, call, output]}),
        ("/messages", {**anthropic, "messages": [question]}),
        ("/messages", {**anthropic, "messages": [question, use, result]}),
    ]


def send_httpx(base: str, stream: bool) -> None:
    with httpx.Client() as client:
        for path, body in calls(stream):
            if stream:
                with client.stream("POST", base + path, json=body) as response:
                    response.read()
            else:
                client.post(base + path, json=body).raise_for_status()


def send_requests(base: str, stream: bool) -> None:
    for path, body in calls(stream):
        response = requests.post(base + path, json=body, stream=stream, timeout=10)
        b"".join(response.iter_content(64)) if stream else response.raise_for_status()


async def send_aiohttp(base: str, stream: bool) -> None:
    async with aiohttp.ClientSession() as session:
        for path, body in calls(stream):
            async with session.post(base + path, json=body) as response:
                await response.read()


def check(trajectory: art.Trajectory) -> None:
    histories = [trajectory, *trajectory.additional_histories]
    assert len(histories) == 3  # a completion's prompt, the Responses conversation, the Anthropic one
    completion_, responses, anthropic = (h.messages_and_choices for h in histories)
    assert completion_[0] == {"role": "user", "content": "2+2="}
    assert completion_[1].message.content == " 4" and completion_[1].logprobs.content[0].logprob == -0.5
    for conversation, logprobs in ((responses, True), (anthropic, False)):
        system, user, call, result, reply = conversation
        assert (system["role"], system["content"], user["content"]) == ("system", "Add.", "2+2?")
        assert call.message.tool_calls[0].function.name == "add" and call.finish_reason == "tool_calls"
        assert json.loads(call.message.tool_calls[0].function.arguments) == {"a": 2}
        assert (result["role"], result["content"]) == ("tool", "4")
        assert reply.message.content == "4" and (reply.logprobs is not None) == logprobs
    assert (
        [t["function"]["name"] for t in histories[1].tools]
        == ["add"]
        == [t["function"]["name"] for t in histories[2].tools]
    )


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("client", ["httpx", "requests", "aiohttp"])
def test_each_api_s_calls_are_recorded_into_the_trajectory(server, client, stream):
    async def rollout() -> None:
        if client == "aiohttp":
            await send_aiohttp(server.base_url, stream)
        else:
            await asyncio.to_thread({"httpx": send_httpx, "requests": send_requests}[client], server.base_url, stream)

    check(asyncio.run(art.trajectory(rollout())))
