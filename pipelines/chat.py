"""`autorl chat RUN[@latest|@best|@STEP]`: talk to a trained agent in the terminal, as it answered in training: the
run's system prompt and tools (offered as in training, `strict_tools` too; calls read from a turn's text as the
agent loop reads them), its checkpoint on the run's own policy server (started for the chat, stopped at its end),
answers streamed as they are written. A first turn is never forced to a call (`tool_choice` "required" is a
training aid). `/reset` starts the conversation over, `/quit` (or end of input) ends it. What the model and the
tools say reaches the terminal with its control characters replaced (`terminal_text`): a model's text cannot
clear the screen, set the window's title or write the clipboard (OSC 52).
"""

from __future__ import annotations

import asyncio
import copy
import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from openai import AsyncOpenAI

from autorl.agents.rollout import RolloutConfig, offered_tools, turn_calls
from autorl.agents.tool_state import RolloutState
from autorl.agents.tools import Toolbox
from autorl.training.checkpoints import checkpoint_name

from .run_view import RunView, split_target

RESET, QUIT = "/reset", "/quit"
HELP = f"{RESET} starts over, {QUIT} (or Ctrl-D) ends"
Write = Callable[[str], None]
"""Where the chat's text goes (the terminal: written and flushed at once)."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 and C1 control characters and DEL, but newline and tab: what starts a terminal's escape sequences."""


def terminal_text(text: str) -> str:
    """`text` with every control character but `\\n` and `\\t` replaced by '?' (ESC, CSI, BEL, carriage return: a
    model's or a tool's text shown, never obeyed by the terminal)."""
    return _CONTROL.sub("?", text)


def shown(write: Write) -> Write:
    """`write` of `terminal_text`: what the chat writes of text it did not make."""
    return lambda text: write(terminal_text(text))


def server_said(exc: openai.APIError) -> str:
    """The message of the server's error (its body's `message`), or the SDK's text where the body has none (the
    SDK's own text adds its status line, "Error code: 400 - ", in the versions that put the message in it)."""
    message = exc.body.get("message") if isinstance(exc.body, dict) else None
    return message if isinstance(message, str) and message else exc.message


@dataclass
class Conversation:
    """One conversation with a served checkpoint: its messages so far, the tools it may call."""

    client: AsyncOpenAI
    model: str
    """The checkpoint's served name."""
    system_prompt: str
    sampling: RolloutConfig
    toolbox: Toolbox | None = None
    max_turns: int = 1
    """Model turns per user message (tool calls and their results in between)."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    state: RolloutState = field(default_factory=RolloutState)
    """The conversation's memory for its function tools: one rollout, from the first user message to a reset."""

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system_prompt}]
        self.state = RolloutState()

    async def say(self, text: str, write: Write) -> None:
        """Add the user's `text`; stream the agent's answer to `write`, running the tools it calls (each call and
        its result shown, control characters replaced: `terminal_text`) for up to `max_turns` model turns."""
        write = shown(write)
        before, state = len(self.messages), copy.deepcopy(self.state)
        if not self.state.input:
            self.state.input = text
        self.messages.append({"role": "user", "content": text})
        try:
            for number in range(1, self.max_turns + 1):
                message = await self._turn(write)
                if self.toolbox is None:
                    break
                read = turn_calls(message, list(self.toolbox.tools), number)  # as training reads a turn's calls
                if not read.calls:
                    break
                for call in read.calls:
                    result = await self.toolbox.call(call.name, call.arguments, self.state)
                    write(f"\n[{call.name}({call.arguments}) -> {result.text[:300]}]\n")
                    self.messages.append({"role": "tool", "tool_call_id": call.id, "content": result.text})
        except openai.APIError:  # the conversation and the tools' memory as they were before this message
            del self.messages[before:]
            self.state = state
            raise
        write("\n")

    async def _turn(self, write: Write) -> dict[str, Any]:
        """One streamed model turn, added to the messages (its tool calls as the server read them)."""
        tools = offered_tools(self.toolbox.openai_tools() if self.toolbox is not None else None, self.sampling)
        stream = await self.client.chat.completions.create(
            model=self.model,
            messages=self.messages,
            max_tokens=self.sampling.max_tokens,
            temperature=self.sampling.temperature,
            stream=True,
            **({"tools": tools} if tools else {}),
        )
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in stream:
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is None:
                continue
            if delta.content:
                write(delta.content)
                content.append(delta.content)
            for part in delta.tool_calls or []:  # streamed in pieces: id and name once, arguments in parts
                call = calls.setdefault(
                    part.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = part.id or call["id"]
                if part.function is not None:
                    call["function"]["name"] += part.function.name or ""
                    call["function"]["arguments"] += part.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if calls:
            message["tool_calls"] = [calls[index] for index in sorted(calls)]
        self.messages.append(message)
        return message


async def repl(conversation: Conversation, read: Callable[[], Awaitable[str | None]], write: Write) -> None:
    """Read the user's lines until `/quit` or the end of input (None), answering each; `/reset` starts over."""
    write = shown(write)  # a server's error message too
    while (line := await read()) is not None:
        text = line.strip()
        if text == QUIT:
            break
        if text == RESET:
            conversation.reset()
            write("(conversation reset)\n")
        elif text:
            try:
                await conversation.say(text, write)
            except openai.APIError as exc:  # e.g. a conversation past the model's context: the chat goes on
                write(
                    f"\n(no answer: the server said {server_said(exc)!r}; the message is dropped, {RESET} starts over)\n"
                )


async def chat(home: Path, target: str, sampling: dict[str, Any], write: Write, note: Write) -> None:
    """Chat with checkpoint `target` of a run in `home` on stdin and `write`; `note`: what the user is told
    (the server's start, the commands). `sampling`: max_tokens and temperature over the run's own."""
    name, which = split_target(target)
    run = RunView(home, name, Counter())
    step = run.checkpoint_step(which)
    system_prompt = run.system_prompt()  # what can fail without a server, before one starts
    policy = run.policy
    try:
        note(f"starting {name}@{checkpoint_name(step)} on the run's server ...")
        served = await policy.serve_step(step)
        conversation = Conversation(
            policy.model.openai_client(),
            served,
            system_prompt,
            run.config.rollout.model_copy(update={k: v for k, v in sampling.items() if v is not None}),
            await policy.toolbox(),
            run.task.max_turns if run.task.has_tools() else 1,
        )
        note(f"chatting with {name}@{checkpoint_name(step)}; {HELP}")
        await repl(conversation, _stdin_line, write)
    finally:
        await policy.aclose()


async def _stdin_line() -> str | None:
    """The next line of standard input, None at its end (Ctrl-D)."""
    if sys.stdin.isatty():
        sys.stdout.write("you> ")
        sys.stdout.flush()
    line = await asyncio.to_thread(sys.stdin.readline)
    return line or None
