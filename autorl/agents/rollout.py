"""Rollouts: the agent loop. The policy answers an input through a chat-completion function, calling tools.

One loop serves every surface that answers an input (training, baseline, evaluation, `autorl benchmark`)
and every model: a chat completion with the task's tools; each tool call is executed (`Toolbox.call`,
which turns every tool problem into a result text the model sees) and its result appended; repeat until
the model answers without a tool call or `max_turns` model turns were taken. Without tools it is one turn.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageFunctionToolCall
from openai.types.chat.chat_completion import ChatCompletion, Choice
from pydantic import BaseModel, ConfigDict, Field

from ruler.messages import as_message

from .. import tracing
from ..trajectories import CONSTRAINED_CHOICES, MessageOrChoice, Trajectory
from .call_reading import CALL_COUNTS, TurnCalls, read_calls
from .tool_state import RolloutState

if TYPE_CHECKING:
    from .tools import Toolbox


class RolloutConfig(BaseModel):
    """Sampling settings of the policy during rollouts."""

    model_config = ConfigDict(use_attribute_docstrings=True, allow_inf_nan=False)  # field docstrings are CLI help

    max_tokens: int = Field(128, ge=1)
    """Completion token cap per policy turn."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature; GRPO needs diverse answers within a group, so keep it near 1."""
    tool_choice: Literal["auto", "required"] = "auto"
    """With tools, whether the turn that answers the input must call one: "auto", the model decides; "required",
    the first turn is a call of one of the tools (OpenAI's tool_choice, which vLLM holds to by structured output;
    the call's arguments too only with `strict_tools`), an exploration aid for a model that does not call a tool
    unprompted. Turns after a tool result are "auto"."""
    required_share: float = Field(0.5, ge=0, le=1)
    """With `tool_choice` "required": the share of each training group's answers whose first turn is forced (the
    others choose, "auto"). A call forced in every answer of a group (1) earns no advantage of its own: its tokens
    follow the same context in each answer and GRPO's advantages sum to 0 over the group; below 1 the forced calls
    are weighed against what the model does unaided, so calling itself is learned (`autorl run`'s groups)."""
    strict_tools: bool = False
    """Offer each function tool with OpenAI's `strict: true`: vLLM then holds a call's arguments to the tool's JSON
    schema by structured output (xgrammar), so a call names the arguments the tool takes, and the tool's required
    ones. Off: a call's arguments are what the model writes, and the tool refuses what its schema does not allow."""


@dataclass
class Turn:
    """One model turn: what joins the conversation (a `Choice`, trained on, or a plain assistant message
    dict from a model that is not trained), why it stopped, and its completion tokens."""

    item: MessageOrChoice
    finish_reason: str | None
    completion_tokens: int
    prompt_tokens: int = 0
    """The turn's input tokens as the server counted them (the whole conversation so far)."""
    constrained: bool = False
    """Sampled under a grammar (`first_turn_choice` "required", or a call of a `strict` tool): the server's
    logprobs are of the masked distribution (a forced token reads 0), not the policy's."""


Complete = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], Awaitable[Turn]]
"""A chat completion: (messages, tools or None) -> the model's turn."""


def openai_completion(client: AsyncOpenAI, model_name: str, config: RolloutConfig) -> Complete:
    """Completions of `model_name` behind an OpenAI-compatible client, with the sampled tokens' logprobs
    (which training needs: our vLLM server returns the sampled token ids with them)."""

    async def complete(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Turn:
        tools = offered_tools(tools, config)
        offered = {"tools": tools, "tool_choice": first_turn_choice(config, messages)} if tools else {}
        response = await client.chat.completions.create(
            model=model_name,
            messages=messages,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            logprobs=True,
            **offered,
        )
        turn = response_turn(response)
        turn.constrained = bool(tools) and (
            offered["tool_choice"] == "required" or (config.strict_tools and _began_a_call(turn.item))
        )
        return turn

    return complete


def _began_a_call(item: MessageOrChoice) -> bool:
    """Whether a turn began a tool call, where a strict tool's grammar takes over (vLLM's structural tag starts
    at `<tool_call>`): a call the server parsed, or the tag in the text (a call cut at `max_tokens`, or one the
    server could not parse)."""
    message = as_message(item)
    return bool(message.get("tool_calls")) or "<tool_call>" in (message.get("content") or "")


def offered_tools(tools: list[dict[str, Any]] | None, config: RolloutConfig) -> list[dict[str, Any]] | None:
    """The tools as a turn offers them: each `strict` under `config.strict_tools`."""
    return [strict(tool) for tool in tools] if tools and config.strict_tools else tools


def strict(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI `tools` entry with `strict: true` on its function (`RolloutConfig.strict_tools`)."""
    if tool.get("type") != "function":
        return tool
    return {**tool, "function": {**tool["function"], "strict": True}}


def first_turn_choice(config: RolloutConfig, messages: list[dict[str, Any]]) -> str:
    """The `tool_choice` of a request: `config.tool_choice` on the turn that answers the input (the last message
    is the user's), "auto" after a tool result."""
    return config.tool_choice if messages and messages[-1].get("role") == "user" else "auto"


def response_turn(response: ChatCompletion) -> Turn:
    """The model turn of a chat completion: its first choice (trained on), why it stopped, its completion tokens."""
    choice = response.choices[0]
    usage = response.usage
    if usage is None:
        return Turn(choice, choice.finish_reason, 0)
    return Turn(choice, choice.finish_reason, usage.completion_tokens, usage.prompt_tokens)


def turn_attributes(turn: Turn) -> dict[str, Any]:
    """A chat turn's span attributes (GenAI semantic conventions): its tokens, why it stopped, its tool calls."""
    return {
        "gen_ai.usage.input_tokens": turn.prompt_tokens,
        "gen_ai.usage.output_tokens": turn.completion_tokens,
        "gen_ai.response.finish_reasons": turn.finish_reason or "",
        "autorl.tool_calls": len(tool_calls(turn.item)),
    }


def turn_metrics(turns: list[Turn], **counts: int) -> dict[str, float | int | bool]:
    """A rollout's metrics from its model turns: `turns`, then `counts` (tool calls, ...), `completion_tokens`
    and `prompt_tokens` (all turns: what the rollout cost) and `truncated` (a turn cut by max_tokens)."""
    return {
        "turns": len(turns),
        **counts,
        "completion_tokens": sum(turn.completion_tokens for turn in turns),
        "prompt_tokens": sum(turn.prompt_tokens for turn in turns),
        "truncated": any(turn.finish_reason == "length" for turn in turns),
    }


def tool_calls(item: MessageOrChoice) -> list[tuple[str, str, str]]:
    """(id, function name, JSON arguments) of each tool call of a model turn."""
    if isinstance(item, Choice):
        return [(c.id, c.function.name, c.function.arguments) for c in item.message.tool_calls or []]
    calls = item.get("tool_calls") or []
    return [(c["id"], c["function"]["name"], _json_text(c["function"]["arguments"])) for c in calls]


def _json_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def turn_calls(item: MessageOrChoice, tool_names: list[str], number: int) -> TurnCalls:
    """The calls of model turn `number` to run (`call_reading.read_calls`: the server's, and those it missed
    that are unambiguous). Where autorl read or repaired one, the turn's message is rewritten to show the calls
    as they run (its text without them, each call with an id: `call_<turn>_<index>` for one read from the text),
    so that the next turn's prompt, the judge and the trajectory see them as calls; its sampled tokens, which
    training uses, stay as they were."""
    message = item.message if isinstance(item, Choice) else None
    content = message.content if message is not None else item.get("content")
    read = read_calls(tool_calls(item), content, tool_names)
    if not read.recovered:
        return read
    read.calls = [
        dataclasses.replace(call, id=call.id or f"call_{number}_{index}") for index, call in enumerate(read.calls)
    ]
    shown = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in read.calls
    ]
    if message is not None:
        message.content = read.content
        message.tool_calls = [ChatCompletionMessageFunctionToolCall.model_validate(call) for call in shown]
    else:
        item.update(content=read.content, tool_calls=shown)
    return read


async def agent_rollout(
    complete: Complete,
    system_prompt: str,
    user_input: str,
    *,
    toolbox: Toolbox | None = None,
    max_turns: int = 1,
    metadata: dict[str, Any] | None = None,
    demos: list[dict[str, Any]] | None = None,
) -> Trajectory:
    """One rollout: the model answers `user_input`, calling the toolbox's tools for up to `max_turns` turns.

    `demos` are earlier turns (demonstrations: user, assistant and tool messages) shown between the
    system prompt and the input. The trajectory holds every message (the model's turns as returned by
    `complete`, with the calls autorl read from their text shown as calls: `turn_calls`; each tool result as
    a `tool` message) and the tools offered. Metrics: `turns`, `tool_calls`, `tool_errors` (results that report
    a problem), with a toolbox `tool_calls_parsed`, `tool_calls_recovered` and `tool_calls_invalid`
    (`TurnCalls.counts`), `completion_tokens` (all turns) and `truncated` (a turn cut by max_tokens). The
    turns sampled under a grammar are listed in `metadata[CONSTRAINED_CHOICES]` (training reads it).
    """
    tools = toolbox.openai_tools() if toolbox is not None else None
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        *(demos or []),
        {"role": "user", "content": user_input},
    ]
    items: list[MessageOrChoice] = list(messages)
    constrained: list[int] = []
    taken: list[Turn] = []
    counts = {"tool_calls": 0, "tool_errors": 0}
    state = RolloutState(user_input)  # the memory of this rollout's function tools (`tool_state`)
    if toolbox is not None:
        counts |= dict.fromkeys(CALL_COUNTS, 0)
    for number in range(1, max_turns + 1):
        with tracing.span("chat", {"gen_ai.operation.name": "chat", "autorl.turn": number}) as span:
            turn = await complete(messages, tools)
            tracing.set_attributes(span, turn_attributes(turn))
        taken.append(turn)
        if turn.constrained:
            constrained.append(len(items))
        read = turn_calls(turn.item, list(toolbox.tools), number) if toolbox is not None else None
        items.append(turn.item)
        messages.append(as_message(turn.item))
        if read is None:
            break
        counts.update({name: counts[name] + count for name, count in read.counts().items()})
        if not read.calls:
            break
        for call_id, name, arguments in ((c.id, c.name, c.arguments) for c in read.calls):
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
            }
            with tracing.span(f"execute_tool {name}", attributes) as span:
                result = await toolbox.call(name, arguments, state)
                tracing.set_attributes(span, {"autorl.tool.ok": result.ok})
            counts["tool_calls"] += 1
            counts["tool_errors"] += int(not result.ok)
            message = {"role": "tool", "tool_call_id": call_id, "content": result.text}
            items.append(message)
            messages.append(message)
    metrics = turn_metrics(taken, **counts)
    metadata = dict(metadata or {})
    if constrained:
        metadata[CONSTRAINED_CHOICES] = constrained
    return Trajectory(messages_and_choices=items, tools=tools, metadata=metadata, metrics=metrics)
