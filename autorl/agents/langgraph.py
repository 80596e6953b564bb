"""LangGraph agents as rollouts: the agent's model calls are captured into a `Trajectory` and trained.

`init_chat_model(model)` is a LangChain chat model (`langchain_openai.ChatOpenAI`) on the model's
endpoint that asks for the sampled tokens' logprobs, as autorl's own rollouts do (our vLLM server returns
the sampled tokens as ids with them). Its requests go through the model's own transport (held back while
the model trains, sent again after a dead server was restarted) and, inside a rollout wrapped by
`wrap_rollout(model, fn)`, each chat completion is recorded: the request's messages and tools, and the
choice that came back. When `fn` returns, the trajectory is the last call's conversation in which each
assistant turn is the recorded choice that produced it, followed by the last call's choice: every model
turn is trained on its sampled tokens, and tool results and user turns are context.

Only calls made through the async client are recorded (`await graph.ainvoke(...)`), unstreamed (the chat
model does not stream); calls whose reply is not part of the last call's conversation (a side question to
the same model, say) are not in the trajectory. Needs the `langgraph` extra: pip install 'autorl[langgraph]'.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, overload

import httpx
from openai.types.chat.chat_completion import ChatCompletion
from pydantic import ValidationError

from ruler.messages import as_message

from ..errors import AutoRLError, MissingExtraError, NoModelCallError
from ..model import Model
from ..trajectories import MessageOrChoice, Trajectory
from .rollout import RolloutConfig, Turn, response_turn, tool_calls, turn_metrics

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

log = logging.getLogger("autorl")
P = ParamSpec("P")
INSTALL = "pip install 'autorl[langgraph]'"


@dataclass
class ModelCall:
    """One chat completion of the policy while a wrapped rollout ran: what was sent, and what came back."""

    messages: list[dict[str, Any]]
    """The request's messages (OpenAI format)."""
    tools: list[dict[str, Any]] | None
    """The request's tools, if any."""
    turn: Turn
    """The model's turn: the response's first choice, why it stopped, its completion tokens."""


@dataclass
class _Recording:
    """The calls of one wrapped rollout, made through chat models of `model`."""

    model: Model
    calls: list[ModelCall] = field(default_factory=list)


_recording: contextvars.ContextVar[_Recording | None] = contextvars.ContextVar("autorl_langgraph", default=None)


class _RecordingTransport(httpx.AsyncBaseTransport):
    """Wraps a model's transport: asks chat completions of the model's current inference name (a trained
    checkpoint may be served under a new one) and records each completion into the running wrapped rollout
    of the same model."""

    def __init__(self, model: Model, inner: httpx.AsyncBaseTransport):
        self._model = model
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return await self._inner.handle_async_request(request)
        body = json.loads(await request.aread())
        if body.get("model") != self._model.get_inference_name():
            body["model"] = self._model.get_inference_name()
            request = _with_body(request, body)
        response = await self._inner.handle_async_request(request)
        recording = _recording.get()
        if recording is None or recording.model is not self._model or response.status_code != 200 or body.get("stream"):
            return response
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        response = httpx.Response(
            response.status_code, headers=response.headers, content=raw, request=request, extensions=response.extensions
        )
        try:
            completion = ChatCompletion.model_validate_json(response.content)
        except ValidationError as exc:  # the client reports it; an exception here would be retried as a network error
            log.warning("a chat completion of %r could not be recorded: %s", self._model.name, exc)
            return response
        if completion.choices:
            recording.calls.append(ModelCall(body.get("messages", []), body.get("tools"), response_turn(completion)))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _with_body(request: httpx.Request, body: dict[str, Any]) -> httpx.Request:
    """`request` with `body` as its JSON content."""
    content = json.dumps(body).encode()
    headers = httpx.Headers(request.headers)
    headers["Content-Length"] = str(len(content))
    return httpx.Request(request.method, request.url, headers=headers, content=content, extensions=request.extensions)


def init_chat_model(model: Model | None = None, **kwargs: Any) -> ChatOpenAI:
    """A LangChain chat model (`langchain_openai.ChatOpenAI`) on `model`'s endpoint whose calls a running
    `wrap_rollout` of the same model records.

    model: a registered `TrainableModel` or any `Model` with an endpoint; None inside a wrapped rollout
        means that rollout's model (ART's `init_chat_model()`).
    kwargs: `ChatOpenAI` settings; they win over ours: logprobs on, the rollout defaults of
        `RolloutConfig` (temperature, max_tokens), no streaming, the chat completions API.

    Requests go to the model's current inference name, so a chat model made before `model.train(...)`
    reaches the newest checkpoint afterwards.
    """
    if model is None:
        recording = _recording.get()
        if recording is None:
            raise AutoRLError(
                "init_chat_model() without a model works only inside a wrap_rollout rollout; pass the model"
            )
        model = recording.model
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        raise MissingExtraError(f"autorl.agents.langgraph needs langchain-openai and langgraph: {INSTALL}") from None
    rollout = RolloutConfig()
    settings: dict[str, Any] = {
        "model": model.get_inference_name(),
        "base_url": model.require_endpoint(),
        "api_key": model.inference_api_key or "none",
        "http_async_client": model.http_client(lambda inner: _RecordingTransport(model, inner)),
        "logprobs": True,
        "temperature": rollout.temperature,
        "max_tokens": rollout.max_tokens,
        "disable_streaming": True,
        "use_responses_api": False,
    }
    return ChatOpenAI(**{**settings, **kwargs})


@overload
def wrap_rollout(model: Model, fn: Callable[P, Awaitable[Any]]) -> Callable[P, Awaitable[Trajectory]]: ...


@overload
def wrap_rollout(
    model: Model, fn: None = None
) -> Callable[[Callable[P, Awaitable[Any]]], Callable[P, Awaitable[Trajectory]]]: ...


def wrap_rollout(model: Model, fn: Callable[P, Awaitable[Any]] | None = None) -> Any:
    """`fn` as a rollout of `model`: an async function that runs `fn(*args, **kwargs)` and returns the
    `Trajectory` of the chat completions that chat models of `init_chat_model(model)` made meanwhile.

    `wrap_rollout(model)` alone is a decorator. When `fn` returns a `Trajectory`, its reward, metrics,
    metadata and logs are kept and its conversation and tools are the recorded ones; anything else it
    returns is dropped (set the reward on the returned trajectory). Metrics: `turns` (model turns in the
    trajectory), `tool_calls` (calls those turns made), `completion_tokens`, `truncated`. Raises
    `NoModelCallError` when no call was recorded.
    """
    if fn is None:
        return functools.partial(wrap_rollout, model)
    rollout_fn = fn

    @functools.wraps(rollout_fn)
    async def rollout(*args: P.args, **kwargs: P.kwargs) -> Trajectory:
        recording = _Recording(model)
        token = _recording.set(recording)
        try:
            result = await rollout_fn(*args, **kwargs)
        finally:
            _recording.reset(token)
        return recorded_trajectory(model, recording.calls, result)

    return rollout


def recorded_trajectory(model: Model, calls: list[ModelCall], result: object = None) -> Trajectory:
    """The trajectory of a wrapped rollout's `calls`: the last call's messages, each assistant turn replaced
    by the recorded choice that produced it (one that matches none stays a context message), then the last
    call's choice; the tools of the last call. `result` is what the rollout returned (see `wrap_rollout`)."""
    if not calls:
        raise NoModelCallError(
            f"the rollout made no chat completion of {model.name!r} to train on; give the agent "
            "autorl.agents.langgraph.init_chat_model(model) and run it with `await graph.ainvoke(...)`"
        )
    last = calls[-1]
    earlier = [call.turn for call in calls[:-1]]
    items: list[MessageOrChoice] = []
    turns: list[Turn] = []
    for message in last.messages:
        turn = _take_turn(earlier, message) if message.get("role") == "assistant" else None
        if turn is None:
            items.append(message)
        else:
            items.append(turn.item)
            turns.append(turn)
    items.append(last.turn.item)
    turns.append(last.turn)
    metrics = turn_metrics(turns, tool_calls=sum(len(tool_calls(turn.item)) for turn in turns))
    if isinstance(result, Trajectory):
        return result.model_copy(
            update={"messages_and_choices": items, "tools": last.tools, "metrics": {**metrics, **result.metrics}}
        )
    return Trajectory(messages_and_choices=items, tools=last.tools, metrics=metrics)


def _take_turn(turns: list[Turn], message: dict[str, Any]) -> Turn | None:
    """Removes and returns the first of `turns` whose choice became `message` (same tool calls, else the
    same text), or None."""
    key = _turn_key(message)
    for index, turn in enumerate(turns):
        if _turn_key(turn.item) == key:
            return turns.pop(index)
    log.debug("an assistant message matches no recorded model call; it stays context: %.80r", message)
    return None


def _turn_key(item: MessageOrChoice) -> tuple[str, ...]:
    """What identifies a model turn when a framework sends it back: its tool calls' ids and names, or,
    without calls, its text."""
    calls = tool_calls(item)
    if calls:
        return tuple(f"{call_id}:{name}" for call_id, name, _ in calls)
    content = as_message(item).get("content")
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ((content or "").strip(),)
