"""Security findings about where a run goes and which path a key guards: a task file's `backend` and `[cluster]
ray` stay on this machine unless a flag names the same address (every spelling of another host refused), and
the pool proxy decides its key on the route it forwards (a real aiohttp server on 127.0.0.1, raw requests)."""

from __future__ import annotations

import http.client
import json

import pytest

from pipelines.config import on_this_machine
from tests.helpers.cli import TASK, run_error_line
from tests.helpers.routing import CHAT

OFF = [
    "http://127.0.0.1@gpu.example.com:7999",  # userinfo: the host is gpu.example.com
    "http://127.0.0.1:x@gpu.example.com:7999",
    "http://127.0.0.1.nip.io:7999",  # a name that resolves to loopback today
    "http://127.0.0.1\\@gpu.example.com:7999",
    "http://127.0.0.1%40gpu.example.com:7999",
    "http://127.1:7999",  # inet_aton's spelling: not an IP literal of ipaddress's, so a name
    "http://2130706433:7999",
    "http://0.0.0.0:7999",
    "http://[::ffff:203.0.113.5]:7999",
    "http://localhost.gpu.example.com:7999",
    "http://:7999",
    "http://127.0.0.1:99999",
    "ray://127.0.0.1@gpu.example.com:10001",
    "ray://127.0.0.1.nip.io:10001",
]
HERE = [
    "http://127.0.0.1:7999",
    "http://127.0.0.2:7999/",
    "https://localhost:7999",
    "http://[::1]:7999",
    "127.0.0.1:6379",
    "localhost:6379",
    "[::1]:6379",
    "ray://127.0.0.1:10001",
]


def task_file(tmp_path, text: str):
    path = tmp_path / "task.toml"
    path.write_text(f'description = "{TASK}"\n{text}')
    return path


@pytest.mark.parametrize("address", OFF)
def test_security_a_task_file_cannot_name_another_host_by_any_spelling(address, tmp_path, run):
    assert not on_this_machine(address)
    key, text = ("ray", f'[cluster]\nray = "{address}"\n') if address.startswith("ray") else ("backend", "")
    text = text or f'backend = "{address}"\n'
    path = task_file(tmp_path, text.replace("\\", "\\\\"))
    assert f"off this machine; a task file cannot do that alone: pass --{key}" in run_error_line(str(path))


@pytest.mark.parametrize("address", HERE)
def test_security_loopback_addresses_in_a_task_file_need_no_flag(address):
    assert on_this_machine(address)


def raw_request(port: int, method: str, target: str, key: str | None = None) -> int:
    """`method target` sent byte for byte (http.client does not normalise it), with `key` if given."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        connection.request(method, target, body=json.dumps(CHAT).encode(), headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


SKIPPING = [
    ("POST", "/health#/../v1/chat/completions"),
    ("POST", "/health#/../v1/completions"),
    ("GET", "/health#/../v1/models"),
    ("POST", "/health?#/../v1/chat/completions"),
    ("POST", "/health#%2f..%2fv1%2fchat%2fcompletions"),
    ("POST", "/health/../v1/chat/completions"),
    ("POST", "/health%2f..%2fv1%2fchat%2fcompletions"),
    ("POST", "/v1/chat/completions#"),
]
"""Spellings that start like the open /health and name an inference route past it."""


def test_security_the_pool_proxy_decides_its_key_on_the_route_it_forwards(serve, proxied):
    servers = [serve()]
    proxy, _, _ = proxied(servers)
    port = int(proxy.base_url.removesuffix("/v1").rsplit(":", 1)[1])
    without_key = {target: raw_request(port, method, target) for method, target in SKIPPING}
    assert set(without_key.values()) == {401}, without_key
    assert servers[0].seen == []  # nothing reached the replica
    with_key = {target: raw_request(port, method, target, proxy.api_key) for method, target in SKIPPING}
    assert {target for target, status in with_key.items() if status == 200} == {
        "/health/../v1/chat/completions",
        "/health%2f..%2fv1%2fchat%2fcompletions",
    }  # a '#' in a request target matches no route
    assert raw_request(port, "GET", "/health") != 401
