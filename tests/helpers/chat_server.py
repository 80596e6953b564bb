"""A real HTTP server on 127.0.0.1 that answers OpenAI chat completions from a function: the edge of unit
tests that drive a real client (openai, DSPy, LangChain) over HTTP; `completion` (one answer, as a chat
completion) and `FakeOpenAIServer` (a generator stand-in: a choice per text, cut at `stop` as vLLM cuts)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict], list[str]]
"""Maps a chat-completions request body to the texts of its choices (one per `n`)."""


def read_request(handler: BaseHTTPRequestHandler, server: Any) -> dict:
    """A POST's JSON body, recorded in `server.requests`, its headers (names in lower case) in `server.headers`."""
    body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
    server.requests.append(body)
    server.headers.append({k.lower(): v for k, v in handler.headers.items()})
    return body


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    """Answer with `payload` as JSON; a client that already left (timed out) is no error."""
    data = json.dumps(payload).encode()
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def send_events(handler: BaseHTTPRequestHandler, events: list[dict]) -> None:
    """Answer with `events` as a stream of server-sent events, then `[DONE]` (the connection closes after it)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    for event in events:
        handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        handler.wfile.flush()
    handler.wfile.write(b"data: [DONE]\n\n")


def chunks(reply: dict) -> list[dict]:
    """A chat completion as the `chat.completion.chunk`s a server streams for it: the role, the text (a chunk per
    logprob entry when there are logprobs, whose tokens are then the text's pieces; else 3 characters a chunk),
    each tool call in two fragments (the first with its id and name), then the finish reason."""
    events = []
    for choice in reply["choices"]:
        message, index = choice["message"], choice["index"]
        entries = (choice.get("logprobs") or {}).get("content")
        text = message.get("content") or ""
        pieces = [({"content": e["token"]}, {"content": [e]}) for e in entries] if entries else [
            ({"content": text[i : i + 3]}, None) for i in range(0, len(text), 3)
        ]  # fmt: skip
        deltas = [({"role": "assistant"}, None), *pieces]
        for number, call in enumerate(message.get("tool_calls") or []):
            arguments = call["function"]["arguments"]
            first = {"index": number, "id": call["id"], "type": "function"}
            first["function"] = {"name": call["function"]["name"], "arguments": arguments[:2]}
            deltas += [({"tool_calls": [first]}, None)]
            deltas += [({"tool_calls": [{"index": number, "function": {"arguments": arguments[2:]}}]}, None)]
        for delta, logprobs in deltas:
            part = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
            events.append(
                {"id": reply["id"], "object": "chat.completion.chunk", "model": reply["model"], "choices": [part]}
            )
        part = {"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}
        events.append(
            {"id": reply["id"], "object": "chat.completion.chunk", "model": reply["model"], "choices": [part]}
        )
    return [{**event, "created": 0} for event in events]


class ChatCompletionServer:
    """`POST /v1/chat/completions` answered with `answer(request body)`, a chat completion as JSON, or streamed
    as its chunks where the request asks for a stream; every request body is kept in `requests`, its headers in
    `headers`, its path in `paths`."""

    def __init__(self, answer: Callable[[dict], dict]):
        self.answer = answer
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                server.paths.append(self.path)
                server.respond(self, read_request(self, server))

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def respond(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        """The answer as JSON, or as the chunks of a stream where the request asks for one."""
        if body.get("stream"):
            send_events(handler, chunks(self.answer(body)))
        else:
            send_json(handler, 200, self.answer(body))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(body: dict, content: str, usage: tuple[int, int] | None = None) -> dict:
    """A chat completion of the model `body` asks for, answering `content`; `usage`: the (prompt, completion)
    tokens it reports, if any."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    reply = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}
    if usage is not None:
        reply["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return reply


def is_prompt_request(body: dict) -> bool:
    """Whether a request asks for the system prompt (else for inputs)."""
    return body["messages"][0]["content"].startswith("Write the instructions")


class FakeOpenAIServer(ChatCompletionServer):
    """`POST /v1/chat/completions` answered by `reply`, one choice per text, each stopped as vLLM stops a
    prefilled answer at `stop`; records every request body."""

    def __init__(self, reply: Reply):
        def answer(body: dict) -> dict:
            choices = []
            for index, text in enumerate(reply(body)):
                stops = [text.find(s) for s in body.get("stop") or [] if s in text]
                finished = text.endswith("<eos>") or bool(stops)
                text = text[: min(stops)] if stops else text.removesuffix("<eos>")
                message = {"role": "assistant", "content": text}
                choices.append({"index": index, "message": message, "finish_reason": "stop" if finished else "length"})
            return {
                "id": "fake", "object": "chat.completion", "created": 0, "model": body["model"], "choices": choices,
                "usage": {"prompt_tokens": 3, "completion_tokens": 2 * len(choices), "total_tokens": 3 + 2 * len(choices)},
            }  # fmt: skip

        super().__init__(answer)

    def input_requests(self) -> list[dict]:
        return [r for r in self.requests if not is_prompt_request(r)]


class StreamingChatServer(ChatCompletionServer):
    """`POST /v1/chat/completions` with `stream: true`, answered as server-sent events: one chunk per delta of
    `deltas(request body)` (`{"content": ...}` or `{"tool_calls": [...]}`), then `[DONE]`."""

    def __init__(self, deltas: Callable[[dict], list[dict]]):
        self.deltas = deltas
        super().__init__(lambda body: {})

    def respond(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        parts = self.deltas(body)
        chunk = {"id": "s", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        send_events(
            handler,
            [
                {
                    **chunk,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if n == len(parts) - 1 else None}],
                }
                for n, delta in enumerate(parts)
            ],
        )
