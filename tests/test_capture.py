"""ART's capture scopes against a real HTTP server on 127.0.0.1 (`tests/helpers/chat_server.py`): the OpenAI SDK
(sync and async, streamed and not; its own httpx2 and the httpx client of `model.openai_client()`), an agent's own
HTTP code over aiohttp and requests, LangChain's
`ChatOpenAI` and LiteLLM record into `autorl.trajectory(...)` the trajectory an agent would have built by hand;
nested scopes, `no_capture`, `additional_histories`, `trajectory_group`, ART's 2025 names and
`yield_trajectory`; a model of `autorl serve` captured through its proxy, and the captured group trained."""

from __future__ import annotations

import asyncio
import json
import os
from types import SimpleNamespace

import aiohttp
import httpx
import openai
import pytest
import requests
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion import Choice

import autorl as art
from autorl.backends.remote.client import RemoteBackend
from autorl.capture.completions import recorded_choice
from autorl.errors import NoTrajectoryError
from tests.helpers.chat_server import ChatCompletionServer, chunks, completion
from tests.helpers.remote import TOKEN, trainable

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1,  "b": 2}'}}


def answer(body: dict) -> dict:
    """A tool call for a user's question with tools, else the text "3 it is" (with logprobs when asked) or, for a
    question that says "fail", an error."""
    last = body["messages"][-1]
    if body.get("tools") and last["role"] == "user":
        reply = completion(body, "")
        reply["choices"][0].update(finish_reason="tool_calls", message={"role": "assistant", "content": None, "tool_calls": [CALL]})  # fmt: skip
        return reply
    reply = completion(body, f"3 it is ({last['content']})"[:40])
    if body.get("logprobs"):
        text = reply["choices"][0]["message"]["content"]
        tokens = [text[i : i + 4] for i in range(0, len(text), 4)]
        entries = [{"token": t, "logprob": -0.25, "bytes": None, "top_logprobs": []} for t in tokens]
        reply["choices"][0]["logprobs"] = {"content": entries}
    return reply


@pytest.fixture(scope="module")
def server():
    chat = ChatCompletionServer(answer)
    yield chat
    chat.close()


def question(text: str = "1+2?") -> list[dict]:
    return [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": text}]


async def two_turn_agent(client, stream: bool) -> list:
    """An agent with a tool and two turns, building by hand the trajectory ART's capture records: the messages
    it sent, each reply's `Choice`, the tool's result."""
    by_hand: list = question()

    async def create(**kwargs):
        messages = [m.message if isinstance(m, Choice) else m for m in by_hand]  # a reply sent back as it came
        created = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=stream, **kwargs)
        reply = await created if asyncio.iscoroutine(created) else created
        if not stream:
            return reply.choices[0]
        return await streamed_choice(reply)

    first = await create()
    by_hand += [first, {"role": "tool", "tool_call_id": first.message.tool_calls[0].id, "content": "3"}]
    second = await create(logprobs=True)
    by_hand.append(second)
    art.current_trajectory(require=True).reward = 1.0
    return by_hand


async def streamed_choice(stream) -> Choice:
    """The choice a stream of chunks makes, as an agent puts it together (read with the SDK's own iterator)."""
    text, calls, entries, finish = "", {}, [], None
    chunks = [c async for c in stream] if hasattr(stream, "__aiter__") else list(stream)
    for chunk in chunks:
        part = chunk.choices[0]
        text += part.delta.content or ""
        for call in part.delta.tool_calls or []:
            known = calls.setdefault(call.index, {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": ""}})  # fmt: skip
            known["function"]["arguments"] += call.function.arguments or ""
        entries += part.logprobs.content if part.logprobs and part.logprobs.content else []
        finish = part.finish_reason or finish
    message = {"role": "assistant", "content": text or None, **({"tool_calls": list(calls.values())} if calls else {})}
    logprobs = {"content": [e.model_dump() for e in entries]} if entries else None
    return Choice.model_validate({"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs})


class RawHTTPClient:
    """An agent's own OpenAI-compatible client over aiohttp or requests (no SDK): `chat.completions.create` posts
    the JSON body and reads the answer, or the stream's events line by line, into the SDK's types."""

    def __init__(self, base_url: str, library: str):
        self.url, self.library = f"{base_url}/chat/completions", library
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    async def create(self, **body) -> ChatCompletion | list[ChatCompletionChunk]:
        body["messages"] = [
            m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else m for m in body["messages"]
        ]
        if self.library == "requests":
            response = requests.post(self.url, json=body, stream=body["stream"], timeout=30)
            lines = list(response.iter_lines()) if body["stream"] else None
            answer = None if body["stream"] else response.json()
        else:
            async with aiohttp.ClientSession() as session, session.post(self.url, json=body) as response:
                lines = [line async for line in response.content] if body["stream"] else None
                answer = None if body["stream"] else await response.json()
        if answer is not None:
            return ChatCompletion.model_validate(answer)
        events = [line.decode().removeprefix("data: ").strip() for line in lines if line.startswith(b"data: ")]
        return [ChatCompletionChunk.model_validate_json(e) for e in events if e != "[DONE]"]


def comparable(items: list) -> list:
    return [m.model_dump(exclude_none=True) if isinstance(m, Choice) else m for m in items]


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
@pytest.mark.parametrize("kind", ["async", "sync", "model_client", "aiohttp", "requests"])
def test_a_captured_trajectory_is_the_one_the_agent_built_by_hand(server, kind, stream):
    model = art.Model(name="m", inference_base_url=server.base_url)
    client = {
        "async": lambda: AsyncOpenAI(base_url=server.base_url, api_key="k"),
        "sync": lambda: OpenAI(base_url=server.base_url, api_key="k"),
        "model_client": model.openai_client,  # the httpx (not httpx2) client of autorl's models
        "aiohttp": lambda: RawHTTPClient(server.base_url, "aiohttp"),  # an agent's own HTTP code, as ART 2026 hooks
        "requests": lambda: RawHTTPClient(server.base_url, "requests"),
    }[kind]()
    by_hand = []

    async def rollout() -> None:
        by_hand.extend(await two_turn_agent(client, stream))

    captured = asyncio.run(art.trajectory(rollout()))
    assert comparable(captured.messages_and_choices) == comparable(by_hand)
    assert captured.tools == TOOLS and captured.reward == 1.0 and captured.additional_histories == []
    assert [type(m).__name__ for m in captured.messages_and_choices] == ["dict", "dict", "Choice", "dict", "Choice"]
    assert captured.messages_and_choices[2].message.tool_calls[0].function.arguments == CALL["function"]["arguments"]
    last = captured.messages_and_choices[-1]
    assert "".join(e.token for e in last.logprobs.content) == last.message.content == "3 it is (3)"
    assert {e.logprob for e in last.logprobs.content} == {-0.25}
    assert captured.metrics["duration"] > 0


def test_scopes_nest_no_capture_hides_them_and_unrelated_conversations_become_additional_histories(server):
    client = OpenAI(base_url=server.base_url, api_key="k")

    def ask(messages: list[dict], **kwargs) -> Choice:
        return client.chat.completions.create(model="m", messages=messages, **kwargs).choices[0]

    with art.Trajectory() as outer:
        ask(question("outer"))
        with art.Trajectory() as inner:
            ask(question("inner"))
            with art.no_capture():
                ask(question("hidden"))
                with art.Trajectory() as inside_hidden:
                    ask(question("new scope"))
            assert art.current_trajectory() is inner
        follow_up = [*question("outer"), outer.messages_and_choices[-1].message, {"role": "user", "content": "more"}]
        ask(follow_up)
        ask(question("a sub-agent"), tools=TOOLS)
    assert art.current_trajectory() is None
    assert [m.get("content") for m in outer.messages()] == [
        "Use the tool.", "outer", "3 it is (outer)", "more", "3 it is (more)"
    ]  # fmt: skip
    assert [h.messages()[1]["content"] for h in outer.additional_histories] == ["a sub-agent"]
    assert outer.additional_histories[0].tools == TOOLS and outer.tools is None
    assert [m["content"] for m in inner.messages()][1:] == ["inner", "3 it is (inner)"]
    assert [m["content"] for m in inside_hidden.messages()][1:] == ["new scope", "3 it is (new scope)"]


def test_a_message_the_agent_sent_back_differently_starts_another_history(server):
    client = OpenAI(base_url=server.base_url, api_key="k")
    with art.Trajectory() as captured:
        first = client.chat.completions.create(model="m", messages=question(), tools=TOOLS).choices[0]
        rewritten = {**CALL, "function": {"name": "add", "arguments": '{"b": 2, "a": 1}'}}  # same JSON, re-written
        sent_back = {"role": "assistant", "content": "", "tool_calls": [rewritten]}
        client.chat.completions.create(model="m", messages=[*question(), sent_back, {"role": "tool", "tool_call_id": "call_1", "content": "3"}], tools=TOOLS)  # fmt: skip
        edited = {"role": "assistant", "content": "I will add."}
        client.chat.completions.create(model="m", messages=[*question(), edited, {"role": "user", "content": "?"}], tools=TOOLS)  # fmt: skip
    assert captured.messages_and_choices[2] == first and len(captured.messages_and_choices) == 5
    assert len(captured.additional_histories) == 1
    assert captured.additional_histories[0].messages_and_choices[2] == edited  # context, not trained


def test_a_stream_cut_before_its_end_is_recorded_as_read_and_one_with_an_error_is_not():
    reply = completion({"model": "m"}, "3 it is")
    events = [f"data: {json.dumps(event)}\n\n".encode() for event in chunks(reply)]
    cut = recorded_choice(b"".join(events[:3]), streamed=True)  # the role and two pieces, no finish reason
    assert (cut.message.content, cut.finish_reason) == ("3 it is"[:6], "length")
    assert recorded_choice(b"".join(events), streamed=True).finish_reason == "stop"
    assert recorded_choice(events[0] + b'data: {"error": {"message": "out of memory"}}\n\n', streamed=True) is None


def test_an_error_answer_and_other_requests_are_not_recorded(server):
    failing = ChatCompletionServer(lambda body: {"error": "no"})
    failing.httpd.RequestHandlerClass.do_POST = lambda self: (self.send_response(500), self.end_headers())
    try:
        with art.Trajectory() as captured:
            with pytest.raises(openai.InternalServerError):
                OpenAI(base_url=failing.base_url, api_key="k", max_retries=0).chat.completions.create(
                    model="m", messages=question()
                )
            other = httpx.post(f"{server.base_url}/other", json={"model": "m", "messages": question()})
            assert other.json()["choices"]  # answered, on another path than chat completions
        assert captured.messages_and_choices == [] and captured.additional_histories == []
    finally:
        failing.close()


def test_trajectory_group_runs_each_rollout_in_its_own_scope_outside_the_enclosing_one(server):
    client = AsyncOpenAI(base_url=server.base_url, api_key="k")

    async def rollout(index: int) -> None:
        await asyncio.sleep(0.01 * (3 - index))
        await client.chat.completions.create(model="m", messages=question(f"q{index}"))
        art.current_trajectory(require=True).reward = index

    async def failing() -> None:
        raise ValueError("rollout broke")

    async def main():
        with art.Trajectory() as enclosing:
            group = await art.trajectory_group(art.trajectory(rollout(i)) for i in range(3))
            kept = await art.trajectory_group([art.trajectory(failing()), art.trajectory(rollout(9))], return_exceptions=True)  # fmt: skip
            with pytest.raises(ValueError, match="rollout broke"):
                await art.trajectory_group([art.trajectory(failing()), art.trajectory(rollout(8))])
        return enclosing, group, kept

    enclosing, group, kept = asyncio.run(main())
    assert [t.reward for t in group] == [0, 1, 2] and enclosing.messages_and_choices == []
    assert [t.messages()[1]["content"] for t in group] == ["q0", "q1", "q2"]
    assert [t.reward for t in kept] == [9] and kept.exceptions == ["ValueError('rollout broke')"]


def test_art_s_2025_names_and_a_scope_asked_for_outside_one():
    async def rollout() -> None:
        art.auto_trajectory(required=True).reward = 0.5

    assert asyncio.run(art.capture_auto_trajectory(rollout())).reward == 0.5
    assert art.auto_trajectory() is None and art.current_trajectory() is None
    with pytest.raises(NoTrajectoryError, match=r"only inside `await autorl\.trajectory") as raised:
        art.current_trajectory(require=True)
    assert isinstance(raised.value, RuntimeError) and "\n" not in str(raised.value)
    with pytest.raises(TypeError, match="takes a coroutine"):
        asyncio.run(art.trajectory(rollout))  # the function, not its coroutine


def test_yield_trajectory_hands_a_trajectory_to_capture_yielded_trajectory():
    made = art.Trajectory(reward=2.0)

    async def rollout(hand_over: bool) -> None:
        if hand_over:
            art.yield_trajectory(made)

    art.yield_trajectory(made)  # outside a capture: nothing happens, as in ART
    assert asyncio.run(art.capture_yielded_trajectory(rollout(True))) is made
    with pytest.raises(NoTrajectoryError, match="ended without yield_trajectory"):
        asyncio.run(art.capture_yielded_trajectory(rollout(False)))


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved:DeprecationWarning")
def test_a_langgraph_react_agent_litellm_and_langchain_are_captured(server):
    """LangGraph's ReAct agent on LangChain's `ChatOpenAI` (no autorl code in it): its tool call, the tool's
    result it sends back (arguments written out again by LangChain) and its answer make one conversation; a
    LiteLLM call beside it, another."""
    from langchain_core.tools import tool  # heavy optional libraries: imported by this test alone
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-map download
    import litellm

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    async def rollout() -> None:
        agent = create_react_agent(ChatOpenAI(model="m", base_url=server.base_url, api_key="k"), [add])
        state = await agent.ainvoke({"messages": [{"role": "user", "content": "1+2?"}]})
        assert state["messages"][-1].content.startswith("3 it is")
        await litellm.acompletion(model="openai/m", api_base=server.base_url, api_key="k", messages=question("litellm"))

    captured = asyncio.run(art.trajectory(rollout()))
    assert [m["role"] for m in captured.messages()] == ["user", "assistant", "tool", "assistant"]
    assert [type(m).__name__ for m in captured.messages_and_choices] == ["dict", "Choice", "dict", "Choice"]
    assert captured.messages()[2]["content"] == "3" and captured.messages()[3]["content"] == "3 it is (3)"
    assert [t["function"]["name"] for t in captured.tools] == ["add"]
    assert [m["content"] for m in captured.additional_histories[0].messages()][1:] == ["litellm", "3 it is (litellm)"]


def test_rollouts_through_autorl_serve_are_captured_and_train(served, chat, tiny_model):
    """A model of `autorl serve` (the real app; the tiny model trained for real, a scripted endpoint for vLLM):
    its client's calls, through the server's /v1 proxy, are captured and the group they make trains a step."""
    backend, model = RemoteBackend(served.url, api_key=TOKEN), trainable(tiny_model)

    async def rollout(reward: float) -> None:
        messages = [{"role": "user", "content": f"hi {reward}"}]
        reply = await model.openai_client().chat.completions.create(model=model.get_inference_name(), messages=messages)
        art.current_trajectory(require=True).reward = reward + len(reply.choices[0].message.content)

    async def program():
        await model.register(backend)
        group = await art.trajectory_group(art.trajectory(rollout(r)) for r in (0.0, 1.0))
        return group, await backend.train(model, [group], learning_rate=1e-6)

    group, result = asyncio.run(program())
    backend.close()
    assert [t.messages()[0]["content"] for t in group] == ["hi 0.0", "hi 1.0"]
    assert [t.messages_and_choices[-1].message.content for t in group] == ["hello", "hello"]
    assert result.step == 1 and result.metrics["trained_tokens"] > 0
