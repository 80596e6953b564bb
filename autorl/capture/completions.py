"""A chat-completion response body as the `Choice` a capture scope records: its first choice, whether it came
as one JSON completion or as a stream of server-sent events (`stream=True`), with the sampled tokens' logprobs
where the server returned them."""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat.chat_completion import Choice
from pydantic import ValidationError

CHAT_PATH = "/chat/completions"
"""The path suffix of the requests a scope records (OpenAI's chat completions API, on any base URL)."""


def chat_request(method: str, path: str, content: bytes) -> dict[str, Any] | None:
    """The JSON body of a chat completion request, or None for any other request (another path or method, a
    body that is not a JSON object with a list of `messages`, each an object with a `role`, and `tools`, if any, a
    list of objects; or one nested past the parser's depth)."""
    if method.upper() != "POST" or not path.rstrip("/").endswith(CHAT_PATH):
        return None
    try:
        body = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(body, dict) or not isinstance(messages := body.get("messages"), list):
        return None
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return None
    tools = body.get("tools")
    return body if tools is None or (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)) else None


def recorded_choice(body: bytes, streamed: bool) -> Choice | None:
    """The first choice of a response body; None where it holds none (an error, a stream that sent no choice)."""
    try:
        payload = _streamed_choice(body) if streamed else json.loads(body)["choices"][0]
        return None if payload is None else Choice.model_validate(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError, ValidationError):
        return None


def _streamed_choice(body: bytes) -> dict[str, Any] | None:
    """The first choice of a stream of `chat.completion.chunk` events, put together as a completion's choice:
    its text, tool calls (their argument fragments joined), logprobs and finish reason. A stream that ended before
    the server finished it (the agent closed it early, the connection broke) is recorded with what arrived, as cut
    by length (`finish_reason` "length"); one with an error event is not recorded."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    logprobs: list[dict[str, Any]] | None = None
    finish_reason = None
    seen = False
    for line in body.decode().splitlines():
        data = line.removeprefix("data:").strip() if line.startswith("data:") else ""
        if not data or data == "[DONE]":
            continue
        event = json.loads(data)
        if "error" in event:
            return None
        for part in event.get("choices") or []:
            if part.get("index", 0) != 0:
                continue
            seen = True
            delta = part.get("delta") or {}
            if delta.get("content"):
                message["content"] = (message["content"] or "") + delta["content"]
            for call in delta.get("tool_calls") or []:
                _add_call_delta(calls.setdefault(call.get("index", 0), {}), call)
            if (part.get("logprobs") or {}).get("content") is not None:
                logprobs = (logprobs or []) + part["logprobs"]["content"]
            finish_reason = part.get("finish_reason") or finish_reason
    if not seen:
        return None
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    choice = {"index": 0, "message": message, "finish_reason": finish_reason or "length"}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return choice


def _add_call_delta(call: dict[str, Any], delta: dict[str, Any]) -> None:
    """Adds a streamed tool call's fragment to the call it belongs to (the first fragment names it)."""
    call.setdefault("type", "function")
    if delta.get("id"):
        call["id"] = delta["id"]
    function = call.setdefault("function", {"name": "", "arguments": ""})
    fragment = delta.get("function") or {}
    function["name"] += fragment.get("name") or ""
    function["arguments"] += fragment.get("arguments") or ""
