"""A fake judge: an HTTP server on 127.0.0.1 that answers OpenAI's chat completions API from a script; and the
pieces of scripted RULER judges (`answers_in` reads a RULER prompt, `judge_completion` answers scores,
`by_content` is a consistent judge)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ruler import JudgeModel
from tests.helpers.chat_server import read_request, send_json


@dataclass
class Reply:
    status: int = 200
    content: str = ""
    delay_s: float = 0.0
    finish_reason: str = "stop"
    """"length": the answer ran past its token cap."""


def scores_json(**scores: float) -> str:
    """A judge answer giving trajectory id `_N` (keyword `_1`, `_2`, ...) the score N."""
    return json.dumps({"scores": {k.lstrip("_"): {"explanation": f"score {v}", "score": v} for k, v in scores.items()}})


class FakeJudgeServer:
    """`POST /v1/chat/completions` answered from `script`; every request body and header is recorded."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = read_request(self, server)
                reply = server.script.popleft() if server.script else Reply(500, "the test script is exhausted")
                time.sleep(reply.delay_s)
                if reply.status == 200:
                    payload = {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply.content},
                                "finish_reason": reply.finish_reason,
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                    }
                else:
                    payload = {"error": {"message": reply.content or f"status {reply.status}", "type": "test"}}
                send_json(self, reply.status, payload)

            def log_message(self, *args) -> None:
                pass

        self._handler = Handler
        self._lock = threading.Lock()
        self._exited = False
        self._http: ThreadingHTTPServer | None = None
        self.port = 0

    def _listen(self) -> None:
        with self._lock:
            if self._exited:
                return
            self._http = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler)
            self._http.daemon_threads = True
            self.port = self._http.server_port
            threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True).start()

    def _close(self) -> None:
        with self._lock:
            http, self._http = self._http, None
        if http is not None:
            http.shutdown()
            http.server_close()

    def close_for(self, seconds: float) -> None:
        """Close the port, so connections are refused, and listen on it again after `seconds`."""
        self._close()
        reopen = threading.Timer(seconds, self._listen)
        reopen.daemon = True
        reopen.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def judge_model(self, **fields) -> JudgeModel:
        return JudgeModel(model="fake-judge", base_url=self.base_url, **fields)

    def __enter__(self) -> FakeJudgeServer:
        self._listen()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._exited = True
        self._close()


TRAJECTORY = re.compile(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', re.S)


def answers_in(request: dict) -> dict[str, str]:
    """The RULER prompt's trajectories: id -> the text of its last assistant message."""
    prompt = request["messages"][1]["content"]
    found = {}
    for tid, body in TRAJECTORY.findall(prompt):
        messages = [json.loads(line) for line in body.splitlines()]
        found[tid] = next(m["content"] for m in reversed(messages) if m["role"] == "assistant")
    return found


def judge_completion(scores: dict[str, float]) -> dict:
    """A RULER answer giving each trajectory id its score."""
    content = json.dumps({"scores": {tid: {"explanation": "scripted", "score": s} for tid, s in scores.items()}})
    return {
        "id": "chatcmpl-audit",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def by_content(request: dict) -> dict:
    """A consistent judge: longer answers score higher, whatever their place (trailing spaces ignored)."""
    return judge_completion({tid: min(1.0, len(text.strip()) / 40) for tid, text in answers_in(request).items()})
