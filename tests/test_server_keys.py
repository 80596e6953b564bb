"""Every server autorl starts requires its own key on every path but /health (`autorl.serving.auth`), and the key
reaches only autorl's clients: never a command line, a log or a record. The real servers' refusals are proven
where slow tests already start them (tests/test_backend_embedded.py: vLLM, its development endpoints included;
tests/test_cluster_judge.py: Ray replicas and the pool proxy); the proxy's in tests/test_cluster_routing.py."""

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from autorl.serving import auth
from autorl.serving.auth import KEY_ENV, RequireKey, authorized, bearer, new_key
from autorl.serving.config import ServerConfig
from autorl.serving.vllm_server import VLLMServer
from ruler.endpoint import ModelEndpoint
from tests.helpers.servers import SMOLLM2, write_config

REACHED: list[str] = []
"""The scope types `app` was called with."""


async def app(scope, receive, send) -> None:
    """A plain ASGI app that answers 200 on every path (and accepts websockets)."""
    REACHED.append(scope["type"])
    if scope["type"] == "lifespan":
        return
    if scope["type"] == "websocket":
        await send({"type": "websocket.accept"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"in"})


def statuses(guarded, headers: dict[str, str]) -> dict[str, int]:
    paths = ["/health", "/v1/models", "/v1/chat/completions", "/server_info", "/pause", "/collective_rpc", "/metrics"]

    async def ask() -> dict[str, int]:
        transport = httpx.ASGITransport(app=guarded)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return {path: (await client.post(path, headers=headers)).status_code for path in paths}

    return asyncio.run(ask())


def test_every_path_but_health_needs_the_key():
    key = new_key()
    guarded = RequireKey(app, key=key)
    for headers in ({}, bearer("wrong"), {"Authorization": key}, {"Authorization": f"Basic {key}"}):
        answered = statuses(guarded, headers)
        assert answered.pop("/health") == 200
        assert set(answered.values()) == {401}, (headers, answered)
    assert set(statuses(guarded, bearer(key)).values()) == {200}
    assert set(statuses(guarded, {"authorization": f"bearer {key}"}).values()) == {200}  # as HTTP allows


def test_an_unkeyed_websocket_is_closed_and_the_apps_lifespan_passes():
    sent: list[dict] = []
    guarded = RequireKey(app, key=new_key())

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    REACHED.clear()
    asyncio.run(guarded({"type": "websocket", "path": "/v1/realtime", "headers": []}, receive, send))
    assert sent == [{"type": "websocket.close", "code": 1008}] and REACHED == []
    asyncio.run(guarded({"type": "lifespan"}, receive, send))  # the app's start-up and shutdown
    assert REACHED == ["lifespan"]


def test_vllm_builds_it_from_the_environment_and_it_refuses_to_start_without_a_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "from-env")
    assert RequireKey(app).key == "from-env"  # as vLLM's --middleware makes it: no arguments
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(RuntimeError, match=KEY_ENV):
        RequireKey(app)


def test_authorized_compares_the_whole_key():
    key = new_key()
    assert len(key) >= 40 and new_key() != key
    assert authorized(f"Bearer {key}", key)
    assert not authorized(f"Bearer {key[:-1]}", key) and not authorized(f"Bearer {key}x", key)
    assert not authorized(None, key) and not authorized("Bearer ", "")  # no key configured: nobody gets in


def test_each_vllm_server_gets_its_own_key_in_its_environment_never_on_its_command_line(tmp_path, monkeypatch):
    write_config(tmp_path, SMOLLM2)
    monkeypatch.setenv("VLLM_API_KEY", "a-users-own")  # vLLM's key (on /v1 only) would refuse autorl's clients
    first, second = (VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig(port=8000)) for _ in range(2))
    assert first.api_key != second.api_key
    for server in (first, second):
        server.port = 8000
        command = server.command()
        assert server.api_key not in " ".join(command)  # /proc/PID/cmdline is readable by every local user
        assert command[command.index("--middleware") + 1] == "autorl.serving.auth.RequireKey"
        env = server.environment()
        assert env[KEY_ENV] == server.api_key and "VLLM_API_KEY" not in env
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(auth.__file__).resolve().parents[2])
        assert server.headers == {"Authorization": f"Bearer {server.api_key}"}
    assert auth.__name__ == "autorl.serving.auth"  # the import path vLLM's --middleware loads


def test_an_endpoints_own_key_reaches_the_call_but_no_record():
    endpoint = ModelEndpoint(model="m", base_url="http://127.0.0.1:9/v1", api_key="k-0123456789")
    assert endpoint.target().api_key == "k-0123456789"
    assert "k-0123456789" not in repr(endpoint) + repr(endpoint.target()) + str(endpoint.model_dump())
    assert "k-0123456789" not in endpoint.model_dump_json()
