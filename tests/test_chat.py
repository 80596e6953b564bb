"""`autorl chat`'s conversation over a real OpenAI client and HTTP stream (a scripted server at the edge): answers
streamed as they arrive, tool calls put together from their pieces and run by the task's real toolbox, `/reset`
and `/quit`, a conversation as one rollout for a tool's memory."""

from __future__ import annotations

import asyncio
import json

import pytest
from openai import AsyncOpenAI

from autorl.agents.rollout import RolloutConfig
from autorl.agents.tools import Toolbox
from autorl.task import load_task
from pipelines.chat import Conversation, repl
from tests.helpers.agents import TICTACTOE_CELL, with_toolbox
from tests.helpers.chat_server import StreamingChatServer, send_json

PROMPT = "Convert units with the tool."


def tool_call_then_answer(body: dict) -> list[dict]:
    """First a `convert` call streamed in pieces, then, once its result is in the messages, an answer."""
    if body["messages"][-1]["role"] == "tool":
        return [{"role": "assistant", "content": "That is "}, {"content": f"{body['messages'][-1]['content']} km."}]
    first = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "convert", "arguments": '{"value": 2'},
    }
    rest = {"index": 0, "function": {"arguments": ', "from_unit": "mi", "to_unit": "km"}'}}
    return [{"role": "assistant", "tool_calls": [first]}, {"tool_calls": [rest]}]


@pytest.fixture
def server():
    server = StreamingChatServer(tool_call_then_answer)
    yield server
    server.close()


def test_a_tool_call_streamed_in_pieces_is_run_and_the_answer_streams_after_it(server):
    written: list[str] = []

    async def body(toolbox):
        client = AsyncOpenAI(base_url=server.base_url, api_key="k")
        conversation = Conversation(client, "r@0002", PROMPT, RolloutConfig(max_tokens=32), toolbox, max_turns=3)
        await conversation.say("How far is 2 miles?", written.append)
        return conversation.messages

    messages = asyncio.run(with_toolbox(body))
    call = messages[2]["tool_calls"][0]
    assert call["id"] == "call_1" and call["function"]["name"] == "convert"
    assert json.loads(call["function"]["arguments"]) == {"value": 2, "from_unit": "mi", "to_unit": "km"}
    result = messages[3]["content"]
    assert messages[3]["role"] == "tool" and result == "2 mi = 3.21869 km"  # the real tool ran
    assert messages[4] == {"role": "assistant", "content": f"That is {result} km."}
    assert written[-3:] == ["That is ", f"{result} km.", "\n"]  # streamed, piece by piece
    assert any(text.startswith("\n[convert(") and result in text for text in written)
    first = server.requests[0]
    assert first["stream"] is True and first["model"] == "r@0002" and first["max_tokens"] == 32
    assert [t["function"]["name"] for t in first["tools"]] == ["convert"]
    assert first["messages"][0] == {"role": "system", "content": PROMPT}


def count_messages(body: dict) -> list[dict]:
    """An answer that says how many messages the request sent (system + user, + earlier turns)."""
    return [{"role": "assistant", "content": f"#{len(body['messages'])}"}]


def chat_through(server: StreamingChatServer, lines) -> tuple[Conversation, str]:
    """`repl` over `lines` (an iterator, read until it ends) against `server`, which is closed after: the
    conversation and what was written."""
    written: list[str] = []

    async def read():
        return next(lines, None)

    async def body():
        client = AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        conversation = Conversation(client, "r@0001", PROMPT, RolloutConfig())
        await repl(conversation, read, written.append)
        return conversation

    try:
        return asyncio.run(body()), "".join(written)
    finally:
        server.close()


def call_in_text_then_answer(body: dict) -> list[dict]:
    """A small model's call: a Hermes block in the text, which the server did not read as a call."""
    if body["messages"][-1]["role"] == "tool":
        return [{"role": "assistant", "content": f"That is {body['messages'][-1]['content']}."}]
    block = '<tool_call>{"name": "convert", "arguments": {"value": 2, "from_unit": "mi", "to_unit": "km"}}</tool_call>'
    return [{"role": "assistant", "content": block}]


def test_a_call_written_in_the_text_runs_as_in_training_and_strict_tools_are_offered_strict():
    server = StreamingChatServer(call_in_text_then_answer)
    written: list[str] = []

    async def body(toolbox):
        client = AsyncOpenAI(base_url=server.base_url, api_key="k")
        conversation = Conversation(client, "r@0002", PROMPT, RolloutConfig(strict_tools=True), toolbox, max_turns=3)
        await conversation.say("How far is 2 miles?", written.append)
        return conversation.messages

    try:
        messages = asyncio.run(with_toolbox(body))
    finally:
        server.close()
    call = messages[2]["tool_calls"][0]
    assert call["id"] == "call_1_0" and call["function"]["name"] == "convert" and not messages[2]["content"]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1_0", "content": "2 mi = 3.21869 km"}
    assert messages[4]["content"] == "That is 2 mi = 3.21869 km."
    assert all(t["function"]["strict"] is True for r in server.requests for t in r["tools"])
    assert all("tool_choice" not in r for r in server.requests)  # never forced to a call


def test_reset_starts_over_and_quit_ends():
    server = StreamingChatServer(count_messages)
    lines = iter(["hi", "again", "/reset", "", "hi", "/quit", "never read"])
    conversation, written = chat_through(server, lines)
    assert written == "#2\n#4\n(conversation reset)\n#2\n"
    assert next(lines) == "never read"
    assert [m["role"] for m in conversation.messages] == ["system", "user", "assistant"]
    assert server.requests[0].get("tools") is None


class RefusesLongConversations(StreamingChatServer):
    """vLLM's answer to a conversation past the model's context: 400, before any token."""

    def respond(self, handler, body: dict) -> None:
        if len(body["messages"]) > 3:
            send_json(handler, 400, {"error": {"message": "maximum context length is 2048 tokens", "code": 400}})
        else:
            super().respond(handler, body)


def test_a_server_error_is_one_line_the_message_is_dropped_and_the_chat_goes_on():
    conversation, text = chat_through(
        RefusesLongConversations(count_messages), iter(["hi", "too long", "/reset", "hi"])
    )
    assert text.startswith("#2\n\n(no answer: the server said ") and "maximum context length is 2048 tokens" in text
    assert text.endswith("the message is dropped, /reset starts over)\n(conversation reset)\n#2\n")
    assert [m["role"] for m in conversation.messages] == ["system", "user", "assistant"]


def test_a_conversation_is_one_rollout_for_a_tool_with_memory():
    """The tic-tac-toe tool that keeps its board (`RolloutState`) keeps it across the user's messages of one
    conversation, from the board the first one states, and starts over after a reset."""

    def play_the_asked_cell(body: dict) -> list[dict]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return [{"role": "assistant", "content": "ok"}]
        play = {"name": "play", "arguments": json.dumps({"cell": int(last["content"][-1])})}
        return [{"role": "assistant", "tool_calls": [{"index": 0, "id": "c", "type": "function", "function": play}]}]

    server = StreamingChatServer(play_the_asked_cell)
    results: list[str] = []

    async def body():
        client = AsyncOpenAI(base_url=server.base_url, api_key="k")
        async with await Toolbox.open(load_task(TICTACTOE_CELL)) as toolbox:
            conversation = Conversation(client, "r@0001", PROMPT, RolloutConfig(), toolbox, max_turns=2)
            for text in ("Board: X.OX.OO.X, I take 2", "then 5", None, "Board: X.OX.OO.X, I take 5"):
                if text is None:
                    conversation.reset()
                    continue
                await conversation.say(text, lambda _: None)
                results.append(conversation.messages[-2]["content"])  # the tool's result, before the answer

    try:
        asyncio.run(body())
    finally:
        server.close()
    assert [r.splitlines()[0] for r in results] == [
        "You played 2; O played 5 and won.",
        "error: the game is over",
        "You played 5 and won.",
    ]


ESCAPES = "\x1b]52;c;ZXZpbA==\x07\x1b]0;title\x07\x1b[2J\x9b31m\r\x00\x7f"
"""An OSC 52 clipboard write, a window title, a screen clear, a C1 CSI, a carriage return, NUL and DEL."""


def test_security_model_and_server_text_reach_the_terminal_without_control_characters():
    def escaping(body: dict) -> list[dict]:
        return [{"role": "assistant", "content": f"{ESCAPES}hi\t"}, {"content": f"there{ESCAPES}\n"}]

    class EscapingErrors(StreamingChatServer):
        def respond(self, handler, body: dict) -> None:
            if len(body["messages"]) > 3:
                send_json(handler, 400, {"error": {"message": f"bad{ESCAPES}", "code": 400}})
            else:
                super().respond(handler, body)

    conversation, text = chat_through(EscapingErrors(escaping), iter(["hi", "again"]))
    assert not [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F], repr(text)
    assert "hi\t" in text and "there" in text and "(no answer: the server said 'bad" in text
    assert ESCAPES in conversation.messages[2]["content"]  # the conversation keeps what the model said
