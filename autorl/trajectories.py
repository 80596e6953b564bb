"""Trajectories and groups of trajectories, with OpenPipe ART's names and semantics.

A `Trajectory` is one rollout: the conversation as a list where each item is either a chat message
(a plain dict, never trained on) or an OpenAI `Choice` returned by the policy (trained on). A
`TrajectoryGroup` holds the rollouts of one input; GRPO compares rewards inside a group.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from contextvars import Token
from datetime import datetime
from typing import TYPE_CHECKING, Any

from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from ruler.messages import as_message

from .capture import recorder
from .errors import FatalError

if TYPE_CHECKING:
    import pandas as pd

MessageOrChoice = dict[str, Any] | Choice


def message_key(item: MessageOrChoice) -> tuple[Any, ...]:
    """What a message says, as an agent or framework sends it back: role, text (parts joined, ends stripped, None
    as empty), tool calls (id, name, arguments as parsed JSON: a framework may write them out again) and the id
    of the call a tool result answers. Fields that say nothing (null, `refusal`, `annotations`) are left out."""
    message = as_message(item)
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    calls = tuple(
        (call.get("id"), call.get("function", {}).get("name"), _parsed(call.get("function", {}).get("arguments")))
        for call in message.get("tool_calls") or []
    )
    return message.get("role"), content.strip(), calls, message.get("tool_call_id")


MESSAGE_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "refusal", "audio", "reasoning_content"}
)
"""The fields of a chat message (OpenAI's chat API, and vLLM's `reasoning_content`): what a recorded message keeps
of what a client sent."""
CALL_FIELDS, FUNCTION_FIELDS = frozenset({"id", "type", "function"}), frozenset({"name", "arguments"})
PART_FIELDS = frozenset({"type", "text", "image_url", "input_audio", "file", "refusal"})
"""The fields of a tool call, of its function, and of a content part."""


def chat_message(message: Any) -> Any:
    """`message` (a dict a client sent) with only the fields the chat API defines, in it, its tool calls and its
    content parts: a key a client adds is not recorded (it could be megabytes). Anything else as it is."""
    if not isinstance(message, dict):
        return message
    kept = {key: value for key, value in message.items() if key in MESSAGE_FIELDS}
    if isinstance(calls := kept.get("tool_calls"), list):
        kept["tool_calls"] = [_only(call, CALL_FIELDS, function=FUNCTION_FIELDS) for call in calls]
    if isinstance(content := kept.get("content"), list):
        kept["content"] = [_only(part, PART_FIELDS) for part in content]
    return kept


def _only(item: Any, fields: frozenset[str], **nested: frozenset[str]) -> Any:
    if not isinstance(item, dict):
        return item
    kept = {key: value for key, value in item.items() if key in fields}
    for key, inner in nested.items():
        if isinstance(kept.get(key), dict):
            kept[key] = {k: v for k, v in kept[key].items() if k in inner}
    return kept


def _keys(history: History | Trajectory) -> list[tuple[Any, ...]]:
    """The `message_key` of each item of `history`, kept between calls for the items it holds still (by identity:
    an item replaced is keyed anew), so recording a call does not re-read every message recorded before."""
    items, cached = history.messages_and_choices, history._keys
    keys = [
        cached[index][1] if index < len(cached) and cached[index][0] is item else message_key(item)
        for index, item in enumerate(items)
    ]
    history._keys = list(zip(items, keys, strict=True))
    return keys


def _parsed(arguments: Any) -> Any:
    """Tool call arguments as their JSON value (a canonical string), or as they are where they are not JSON."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (TypeError, ValueError):
        return arguments


def _revived(cls: type, items: Any) -> Any:
    """Saved conversations (JSON) come back with their `Choice`s as `Choice` objects."""
    if not isinstance(items, list):
        return items
    return [
        Choice.model_validate(m) if isinstance(m, dict) and {"message", "finish_reason"} <= m.keys() else m
        for m in items
    ]


CONSTRAINED_CHOICES = "constrained_choices"
"""A `Trajectory.metadata` key: the indices in `messages_and_choices` of the `Choice`s sampled under a grammar
(`autorl.agents.rollout.Turn.constrained`). The server's logprobs of them are the masked distribution's, so
training takes their old logprobs as unknown (the policy's own at training time): a forced token that reads 0
would otherwise weigh its gradient by the policy's tiny probability of it, and the forced call never be learned."""


class History(BaseModel):
    """Another conversation of a rollout (ART's `History`): a sub-agent's, or the context a long rollout started
    afresh; trained as its own sequence with its trajectory's advantage (`Trajectory.additional_histories`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages_and_choices: list[MessageOrChoice]
    """Its messages (context) and the policy's `Choice`s (trained on)."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI-format tool definitions offered in it, if any."""

    _revive_choices = field_validator("messages_and_choices", mode="before")(_revived)
    _keys: list[tuple[Any, tuple[Any, ...]]] = PrivateAttr(default_factory=list)

    def messages(self) -> list[dict[str, Any]]:
        """The conversation as plain chat messages (choices turned into assistant messages)."""
        return [as_message(m) for m in self.messages_and_choices]


class Trajectory(BaseModel):
    """One rollout of the policy and its reward."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages_and_choices: list[MessageOrChoice] = Field(default_factory=list)
    """The conversation: dict messages (context) and `Choice`s sampled from the policy (trained on)."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI-format tool definitions the policy was offered, if any."""
    reward: float = 0.0
    """The scalar reward; GRPO uses it relative to the other trajectories of the group."""
    metrics: dict[str, float | int | bool] = Field(default_factory=dict)
    """Numbers to log with this rollout (judge scores, token usage, ...)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data about the rollout (input id, scenario, ...)."""
    logs: list[str] = Field(default_factory=list)
    """Human-readable notes, e.g. the judge's explanation."""

    initial_policy_version: int | None = None
    """The policy version (training step) that sampled the trajectory's first token, as ART records it
    (`autorl.PipelineTrainer` sets it); None where not recorded."""
    final_policy_version: int | None = None
    """The newest policy version when the rollout ended: every token was sampled by a version between the two."""
    additional_histories: list[History] = Field(default_factory=list)
    """Other conversations of this rollout (ART's), each trained as its own sequence with this trajectory's
    advantage."""
    start_time: datetime = Field(default_factory=datetime.now, exclude=True)
    """When the trajectory was made (not saved): `finish()` measures the rollout's duration from it."""

    _revive_choices = field_validator("messages_and_choices", mode="before")(_revived)
    _scope_tokens: list[Token] = PrivateAttr(default_factory=list)
    _keys: list[tuple[Any, tuple[Any, ...]]] = PrivateAttr(default_factory=list)

    def messages(self) -> list[dict[str, Any]]:
        """The conversation as plain chat messages (choices turned into assistant messages)."""
        return [as_message(m) for m in self.messages_and_choices]

    def log(self, message: str) -> None:
        self.logs.append(message)

    def __enter__(self) -> Trajectory:
        """ART's capture scope: every chat completion made through httpx inside `with Trajectory() as t:` is
        recorded into `t` (`add_completion`); the innermost of nested scopes records. On exit, `finish()`."""
        self._scope_tokens.append(recorder.push(self))
        return self

    def __exit__(self, *exc_info: object) -> None:
        recorder.pop(self, self._scope_tokens.pop())
        self.finish()

    def add_completion(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, choice: Choice
    ) -> list[MessageOrChoice]:
        """Records one chat completion, as ART's capture does: the request's `messages` and `tools` and the
        `choice` that came back join the first of this trajectory's conversations (itself, then
        `additional_histories`) that the messages continue with the same tools: the messages it lacks, then the
        choice. Messages that continue none start a new entry of `additional_histories` (a sub-agent, a context
        started afresh). An assistant message the agent sent back continues the recorded choice it came from
        when both say the same (text, or tool calls with the same ids, names and arguments). A message keeps only
        the fields the chat API defines (`chat_message`); each history's keys are kept between calls (`_keys`).
        Returns what it added (the messages, then the choice)."""
        keys = [message_key(m) for m in messages]
        for history in [self, *self.additional_histories]:
            known = _keys(history)
            if keys[: len(known)] == known and (history.tools == tools or not known):
                break
        else:
            history = History(messages_and_choices=[])
            self.additional_histories.append(history)
        added = [*(chat_message(m) for m in messages[len(history.messages_and_choices) :]), choice]
        history.messages_and_choices.extend(added)
        history.tools = tools
        return added

    def finish(self) -> Trajectory:
        """Record the rollout's duration since `start_time` as `metrics["duration"]` (seconds); returns itself, as
        ART's does (`return trajectory.finish()`)."""
        self.metrics["duration"] = (datetime.now() - self.start_time).total_seconds()
        return self


async def outcome(rollout: Awaitable[Trajectory]) -> Trajectory | Exception:
    """The trajectory a rollout returns, or the exception it raised: a failed rollout is data, counted against
    `max_exceptions` (a `FatalError` ends the run: it propagates)."""
    try:
        result = await rollout
        if not isinstance(result, Trajectory):
            raise TypeError(f"a rollout returned {type(result).__name__}, expected autorl.Trajectory")
    except FatalError:
        raise
    except Exception as exc:
        return exc
    return result


class TrajectoryGroup(BaseModel):
    """The trajectories of one input.

    Built from trajectories, or from awaitables that produce them (ART style):
    ``TrajectoryGroup(rollout(model, scenario) for _ in range(8))``; such a group is awaited
    (directly or by `gather_trajectory_groups`) to run the rollouts. A rollout that raises becomes an
    entry of `exceptions` instead of a trajectory.
    """

    trajectories: list[Trajectory] = Field(default_factory=list)
    exceptions: list[str] = Field(default_factory=list)
    """`repr` of each exception raised by a rollout of this group."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    _pending: list[Awaitable[Trajectory]] = PrivateAttr(default_factory=list)
    _raised: list[BaseException] = PrivateAttr(default_factory=list)

    def __init__(
        self,
        trajectories: Iterable[Trajectory | Awaitable[Trajectory] | BaseException] = (),
        *,
        exceptions: Iterable[BaseException | str] = (),
        metadata: dict[str, Any] | None = None,
    ) -> None:
        # dicts arrive when pydantic validates saved JSON (it calls this __init__)
        items = [Trajectory.model_validate(t) if isinstance(t, dict) else t for t in trajectories]
        done = [t for t in items if isinstance(t, Trajectory)]
        errors = [repr(e) if isinstance(e, BaseException) else e for e in exceptions]
        errors += [repr(e) for e in items if isinstance(e, BaseException)]
        super().__init__(trajectories=done, exceptions=errors, metadata=metadata or {})
        self._pending = [t for t in items if inspect.isawaitable(t)]
        self._raised = [e for e in (*items, *exceptions) if isinstance(e, BaseException)]

    @property
    def pending(self) -> int:
        """How many rollouts of this group have not been awaited yet."""
        return len(self._pending)

    async def resolve(self, on_done: Callable[[bool], object] | None = None) -> TrajectoryGroup:
        """Run the pending rollouts concurrently; `on_done(ok: bool)` is called after each one."""

        async def run(awaitable: Awaitable[Trajectory]) -> Trajectory | BaseException:
            result = await outcome(awaitable)
            if on_done is not None:
                on_done(isinstance(result, Trajectory))
            return result

        pending, self._pending = self._pending, []
        for result in await asyncio.gather(*(run(a) for a in pending)):
            if isinstance(result, Trajectory):
                self.trajectories.append(result)
            else:
                self.exceptions.append(repr(result))
                self._raised.append(result)
        return self

    def discard(self) -> None:
        """Drop the rollouts not awaited yet, closing their coroutines (a group that will not run)."""
        pending, self._pending = self._pending, []
        for awaitable in pending:
            if inspect.iscoroutine(awaitable):
                awaitable.close()

    @property
    def raised(self) -> list[BaseException]:
        """The exception objects behind `exceptions` that were raised in this process."""
        return list(self._raised)

    def __await__(self):
        return self.resolve().__await__()

    def __len__(self) -> int:
        return len(self.trajectories)

    def __iter__(self):  # type: ignore[override]  # iterate trajectories, as ART does
        return iter(self.trajectories)


SCORE_COLUMNS = ["input", "variant", "reward", "answer", "explanation"]


def scores_frame(groups: Iterable[TrajectoryGroup]) -> pd.DataFrame:
    """The groups' trajectories as a table, a row each: `input` and `variant` (from their metadata), `reward`,
    `answer` (the last message's content) and `explanation` (the last log line: the judge's)."""
    import pandas as pd  # only where a table is written: `import autorl` stays light

    rows = [
        {
            "input": t.metadata.get("input", ""),
            "variant": t.metadata.get("variant", ""),
            "reward": t.reward,
            "answer": t.messages()[-1].get("content", ""),
            "explanation": t.logs[-1] if t.logs else "",
        }
        for g in groups
        for t in g.trajectories
    ]
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def truncated(trajectory: Trajectory) -> bool:
    """Whether any of the policy's turns was cut by max_tokens (finish_reason "length")."""
    return any(isinstance(item, Choice) and item.finish_reason == "length" for item in trajectory.messages_and_choices)
