"""The policy's clients send a request again when its server could not be reached and the backend brought
the server back (`InferenceGate.recover`); the end-to-end case (a killed vLLM server mid-run) is in
tests/test_pipeline_e2e.py."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from autorl.model import RECOVERY_RETRIES, InferenceGate, _GatedTransport


def client(failures: list[Exception], recovered: bool | None) -> tuple[httpx.AsyncClient, list[str]]:
    """A client whose server fails with `failures` (one per request, in order) and then answers; its
    gate's recover returns `recovered` (None: no recover set, as for a model without a backend)."""
    events: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        events.append(f"request {request.content.decode()}")
        if failures:
            raise failures.pop(0)
        return httpx.Response(200, json={"ok": True})

    async def recover() -> bool:
        events.append("recover")
        return recovered

    gate = InferenceGate()
    gate.recover = None if recovered is None else recover
    return httpx.AsyncClient(transport=_GatedTransport(gate, httpx.MockTransport(server))), events


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
