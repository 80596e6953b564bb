"""The policy's clients send a request again when its server could not be reached, cut it off or answered that
its engine died, and the backend brought the server back (`GatedTransport`'s `recover`). A real vLLM server whose
engine is SIGKILLed while it generates, mid-run, restarted without a step lost, is in tests/test_pipeline_e2e.py
(the SIGKILL test's resumed run)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from autorl.backends.transport import ENGINE_DIED, RECOVERY_RETRIES, GatedTransport, InferenceGate
from autorl.serving.config import ServerConfig
from autorl.serving.vllm_server import VLLMServer


def client(failures: list[Exception | httpx.Response], recovered: bool | None) -> tuple[httpx.AsyncClient, list[str]]:
    """A client whose server fails with `failures` (one per request, in order: raised, or a response answered)
    and then answers; its transport's recover returns `recovered` (None: no recover given, as for a model without a
    backend)."""
    events: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        events.append(f"request {request.content.decode()}")
        if failures:
            failure = failures.pop(0)
            if isinstance(failure, httpx.Response):
                return failure
            raise failure
        return httpx.Response(200, json={"ok": True})

    async def recover() -> bool:
        events.append("recover")
        return recovered

    transport = GatedTransport(InferenceGate(), None if recovered is None else recover, httpx.MockTransport(server))
    return httpx.AsyncClient(transport=transport), events


def post(http: httpx.AsyncClient) -> httpx.Response:
    async def send() -> httpx.Response:
        async with http:
            return await http.post("http://policy/v1/chat/completions", content=b"same body")

    return asyncio.run(send())


def test_a_request_to_a_dead_server_is_sent_again_once_it_is_back():
    cut = [httpx.ConnectError("refused"), httpx.RemoteProtocolError("Server disconnected")]
    http, events = client(cut, recovered=True)
    assert post(http).json() == {"ok": True}
    assert events == ["request same body", "recover"] * 2 + ["request same body"]


def test_a_server_that_stays_down_or_cannot_recover_fails_the_request():
    http, events = client([httpx.ConnectError("refused")] * 5, recovered=True)
    with pytest.raises(httpx.ConnectError):
        post(http)
    assert events.count("recover") == RECOVERY_RETRIES and events.count("request same body") == RECOVERY_RETRIES + 1

    http, events = client([httpx.ConnectError("refused")], recovered=False)
    with pytest.raises(httpx.ConnectError):
        post(http)
    assert events == ["request same body", "recover"]

    http, events = client([httpx.ConnectError("refused")], recovered=None)  # no backend: no retry here
    with pytest.raises(httpx.ConnectError):
        post(http)
    assert events == ["request same body"]


def test_other_errors_are_not_retried():
    http, events = client([httpx.ReadTimeout("slow")], recovered=True)
    with pytest.raises(httpx.ReadTimeout):
        post(http)
    assert events == ["request same body"]


def test_a_request_answered_that_the_engine_died_is_sent_again_once_the_server_is_back():
    engine_died = {"error": {"message": ENGINE_DIED.decode() + ". See stack trace (above) for the root cause."}}
    http, events = client([httpx.Response(500, json=engine_died)], recovered=True)
    assert post(http).json() == {"ok": True}
    assert events == ["request same body", "recover", "request same body"]

    other = {"error": {"message": "something else broke"}}  # another 500 is the caller's, as it is
    http, events = client([httpx.Response(500, json=other)], recovered=True)
    response = post(http)
    assert response.status_code == 500 and response.json() == other
    assert events == ["request same body"]


def test_a_server_is_healthy_only_while_its_process_runs_and_its_health_check_answers(tmp_path):
    health = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=health.serve_forever, daemon=True).start()
    server = VLLMServer(tmp_path, "m", tmp_path / "vllm.log", ServerConfig(port=health.server_port))
    server.port = health.server_port
    try:
        assert not server.healthy()  # no process
        server._process = subprocess.Popen(["sleep", "60"])  # stands in for vLLM: only `running` is asked
        Health.status = 200
        assert server.healthy()
        Health.status = 503  # vLLM's answer once its engine died
        assert not server.healthy()
        health.shutdown()
        health.server_close()
        assert not server.healthy()  # shutting down: refused
    finally:
        server.stop()


class Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass
