"""The other model APIs a capture scope records, read as chat completions (completions.py reads those): OpenAI's
Completions (`/completions`: its prompt recorded as one user message) and Responses (`/responses`: `instructions`
as the system message, its input items as messages, function tools and calls as chat tools and tool calls, the
output text's logprobs) and Anthropic's Messages (`/messages`: `system`, text, `tool_use` and `tool_result`
blocks, tools' `input_schema`; no logprobs). Each request becomes a chat request (`messages`, `tools`, `stream`,
and `API` naming what it was) and each answer, JSON or server-sent events, the `Choice` it returned, so every
API's calls join the same `Trajectory` (`Trajectory.add_completion`)."""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat.chat_completion import Choice
from pydantic import ValidationError

from .completions import chat_request, recorded_choice

API = "_autorl_api"
"""The key of a captured request that names its API (absent: chat completions)."""


def captured_request(method: str, path: str, content: bytes) -> dict[str, Any] | None:
    """A request of any API a scope records, as a chat request (see the module), or None."""
    if (chat := chat_request(method, path, content)) is not None:
        return chat
    path = path.rstrip("/")
    if method.upper() != "POST" or not path.endswith(("/completions", "/responses", "/messages")):
        return None
    try:
        body = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    try:
        if path.endswith("/completions") and isinstance(body.get("prompt"), str | list):
            prompt = body["prompt"] if isinstance(body["prompt"], str) else "".join(body["prompt"])
            return _chat("completions", [{"role": "user", "content": prompt}], None, body)
        if path.endswith("/responses") and isinstance(body.get("input"), str | list):
            return _chat("responses", _responses_messages(body), _tools(body, "parameters"), body)
        if path.endswith("/messages") and isinstance(body.get("messages"), list):
            return _chat("messages", _anthropic_messages(body), _tools(body, "input_schema"), body)
    except (KeyError, TypeError, AttributeError):
        return None
    return None


def captured_choice(body: bytes, request: dict[str, Any]) -> Choice | None:
    """The `Choice` an answer to `request` (`captured_request`'s) returned, or None."""
    api, streamed = request.get(API), bool(request.get("stream"))
    if api is None:
        return recorded_choice(body, streamed)
    try:
        events = _events(body) if streamed else [json.loads(body)]
        choice = {"completions": _completion, "responses": _response, "messages": _anthropic}[api](events, streamed)
        return None if choice is None else Choice.model_validate(choice)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError,
            ValidationError):  # fmt: skip
        return None


def _chat(api: str, messages: list[dict], tools: list[dict] | None, body: dict) -> dict[str, Any]:
    return {"messages": messages, "tools": tools, "stream": bool(body.get("stream")), API: api}


def _events(body: bytes) -> list[dict[str, Any]]:
    """The JSON events of a server-sent-events stream."""
    lines = (line.removeprefix("data:").strip() for line in body.decode().splitlines() if line.startswith("data:"))
    return [json.loads(data) for data in lines if data and data != "[DONE]"]


def _text(content: Any) -> str:
    """A content value (a string, or a list of text parts of any API) as its text."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _tools(body: dict, schema: str) -> list[dict] | None:
    """A request's function tools as chat tools (Responses: `parameters`; Anthropic: `input_schema`)."""
    tools = [t for t in body.get("tools") or [] if t.get("type", "function") in ("function", "custom") and "name" in t]
    return [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                              "parameters": t.get(schema, {})}} for t in tools] or None  # fmt: skip


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _responses_messages(body: dict) -> list[dict]:
    """A Responses request's instructions and input items as chat messages."""
    messages = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _text(item["content"])})
        elif kind == "function_call":
            call = _call(item["call_id"], item["name"], item["arguments"])
            if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text(item["output"])})
    return messages


def _anthropic_messages(body: dict) -> list[dict]:
    """An Anthropic Messages request's system and messages (their text, tool_use and tool_result blocks) as chat
    messages."""
    messages = [{"role": "system", "content": _text(body["system"])}] if body.get("system") else []
    for message in body["messages"]:
        content = message["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        messages += [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": _text(b.get("content"))}
                     for b in results]  # fmt: skip
        text = _text([b for b in blocks if b.get("type") == "text"])
        calls = [_call(b["id"], b["name"], json.dumps(b["input"])) for b in blocks if b.get("type") == "tool_use"]
        if calls:
            messages.append({"role": "assistant", "content": text or None, "tool_calls": calls})
        elif text or not results:
            messages.append({"role": message["role"], "content": text})
    return messages


def _choice(text: str | None, calls: list[dict], finish: str, logprobs: list[dict] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return choice


def _completion(events: list[dict], streamed: bool) -> dict[str, Any] | None:
    """A Completions answer (or its stream's chunks): the first choice's text and its tokens' logprobs."""
    parts = [c for e in events for c in e.get("choices") or [] if c.get("index", 0) == 0]
    if not parts:
        return None
    tokens = [(t, lp) for p in parts for t, lp in zip(*_legacy_logprobs(p), strict=True)]
    logprobs = [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []} for t, lp in tokens]
    finish = next((p["finish_reason"] for p in reversed(parts) if p.get("finish_reason")), "length")
    return _choice("".join(p.get("text") or "" for p in parts), [], finish, logprobs or None)


def _legacy_logprobs(part: dict) -> tuple[list[str], list[float]]:
    logprobs = part.get("logprobs") or {}
    return logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []


def _response(events: list[dict], streamed: bool) -> dict[str, Any] | None:
    """A Responses answer (or the response its stream's last `response.completed` / `.incomplete` event holds)."""
    if streamed:
        done = [e["response"] for e in events if e.get("type") in ("response.completed", "response.incomplete")]
        if not done:
            return None
        events = done[-1:]
    response = events[0]
    text, calls, logprobs = None, [], []
    for item in response.get("output") or []:
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    text = (text or "") + part["text"]
                    logprobs += part.get("logprobs") or []
        elif item.get("type") == "function_call":
            calls.append(_call(item["call_id"], item["name"], item["arguments"]))
    if text is None and not calls:
        return None
    finish = "tool_calls" if calls else "length" if response.get("status") == "incomplete" else "stop"
    return _choice(text, calls, finish, logprobs or None)


ANTHROPIC_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def _anthropic(events: list[dict], streamed: bool) -> dict[str, Any] | None:
    """An Anthropic Messages answer, or its stream's events put together (text and input_json deltas)."""
    if streamed:
        blocks: dict[int, dict] = {}
        stop = None
        for event in events:
            kind = event.get("type")
            if kind == "error":
                return None
            if kind == "content_block_start":
                blocks[event["index"]] = {**event["content_block"], "partial": ""}
            elif kind == "content_block_delta":
                block, delta = blocks[event["index"]], event["delta"]
                if delta.get("type") == "text_delta":
                    block["text"] = block.get("text", "") + delta["text"]
                elif delta.get("type") == "input_json_delta":
                    block["partial"] += delta["partial_json"]
            elif kind == "message_delta":
                stop = event["delta"].get("stop_reason") or stop
        for block in blocks.values():
            if block.get("type") == "tool_use" and block["partial"]:
                block["input"] = json.loads(block["partial"])
        message = {"content": [blocks[i] for i in sorted(blocks)], "stop_reason": stop}
    else:
        message = events[0]
    content = message.get("content") or []
    texts = [b["text"] for b in content if b.get("type") == "text"]
    calls = [
        _call(b["id"], b["name"], json.dumps(b.get("input") or {})) for b in content if b.get("type") == "tool_use"
    ]
    if not texts and not calls:
        return None
    return _choice("".join(texts) if texts else None, calls, ANTHROPIC_FINISH.get(message.get("stop_reason"), "length"),
                   None)  # fmt: skip
