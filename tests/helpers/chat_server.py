"""A real HTTP server on 127.0.0.1 that answers OpenAI chat completions from a function: the edge of unit
tests that drive a real client (openai, DSPy, LangChain) over HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


class ChatCompletionServer:
    """`POST /v1/chat/completions` answered with `answer(request body)`, a chat completion as JSON; every
    request body is kept in `requests`, its headers in `headers`, its path in `paths`."""

    def __init__(self, answer: Callable[[dict], dict]):
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                server.paths.append(self.path)
                send_json(self, 200, answer(read_request(self, server)))

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
