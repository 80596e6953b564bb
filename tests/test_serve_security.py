"""`autorl serve` and the cluster's pool proxy as an outside client tries them, read as tables: every spelling of
a path outside the inference allowlist (dot segments, %2e, %2F, double encoding, backslashes, duplicate
slashes) is 404 and reaches nothing upstream; every spelling of an allowed route reaches exactly that route.
The app runs for real on 127.0.0.1 (uvicorn) over a stand-in placement whose "vLLM" is a plain HTTP server
that records the paths it was asked for; requests go out byte for byte (http.client: no client-side
normalisation). The same against a real vLLM server on the embedded model: tests/test_remote_serve.py."""

from __future__ import annotations

import http.client
import json

from test_cluster_routing import CHAT, proxied, serve  # noqa: F401 (fixtures)
from test_remote_backend import TOKEN, call, chat, register_body, served  # noqa: F401 (fixtures)

from autorl.serving.routes import INFERENCE_ROUTES, allowed_route, normalised

OUTSIDE = [
    "/v1/../collective_rpc",
    "/v1/../pause",
    "/v1/%2e%2e/pause",
    "/v1/%2E%2E/sleep",
    "/v1/.%2e/collective_rpc",
    "/v1/..%2Fpause",
    "/v1/..%2fcollective_rpc",
    "/v1/%2e%2e%2fpause",
    "/v1/%252e%252e/pause",
    "/v1/%252e%252e%252fcollective_rpc",
    "/v1/%25252e%25252e/pause",
    "/v1/..\\pause",
    "/v1/..%5Cpause",
    "/v1/%5C..%5Ccollective_rpc",
    "/v1//../pause",
    "/v1/./../sleep",
    "/v1/chat/../../collective_rpc",
    "/v1/chat/completions/../../../pause",
    "/v1/chat%2fcompletions%2f..%2f..%2f..%2fpause",
    "/v1/../../../../etc/passwd",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/v1/%6coad_lora_adapter",
    "/v1/chat/../load_lora_adapter",
    "/v1/chat/completions%00",
    "/v1/chat/completions;/../../pause",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/audio/transcriptions",
    "/v1/models",  # a POST: the model list is GET only
    "/v1/%ff%fe",
]
"""Paths a POST must not pass on; each is a dev endpoint, LoRA loading, or another route of vLLM's."""
INSIDE = {
    "/v1/chat/completions": "/v1/chat/completions",
    "/v1/completions": "/v1/completions",
    "/v1//chat/completions": "/v1/chat/completions",
    "/v1/chat/./completions": "/v1/chat/completions",
    "/v1/x/../chat/completions": "/v1/chat/completions",
    "/v1/chat%2Fcompletions": "/v1/chat/completions",
    "/v1/chat/completions/": "/v1/chat/completions",
    "/v1/%63hat/completions": "/v1/chat/completions",
    "/v1/chat/completions?x=../../pause": "/v1/chat/completions",
}
"""Spellings of allowed routes, and the route that reaches the server (never the client's spelling)."""


def test_paths_are_matched_as_the_server_would_read_them():
    assert normalised("/v1/%252e%252e/%2e/x//y/") == "/x/y"
    assert normalised("/a\\..\\b") == "/b"
    assert normalised("/v1/../../x") is None  # above the root
    assert normalised("/v1/%00") is None and normalised("/v1/\x7f") is None
    assert normalised("/%" + "25" * 5 + "2e") is None  # still encoded after MAX_DECODES
    for path in OUTSIDE:
        assert allowed_route("POST", path) is None, path
    for path, route in INSIDE.items():
        assert allowed_route("POST", path) == route, path
    assert allowed_route("GET", "/v1/models") == "/v1/models" and allowed_route("GET", "/v1/chat/completions") is None
    assert set(INFERENCE_ROUTES) == {"/v1/chat/completions", "/v1/completions", "/v1/models"}


def raw_post(port: int, path: str, body: dict, token: str = TOKEN) -> tuple[int, str]:
    """POST `path` exactly as written (http.client does not normalise it), with the token."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = json.dumps(body).encode()
        connection.request("POST", path, body=data, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def test_autorl_serve_passes_on_the_allowlist_only_whatever_the_spelling(served, chat, tiny_model):  # noqa: F811
    assert call("POST", f"{served.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    body = {"model": "agent", "messages": [{"role": "user", "content": "hi"}], "path": "/collective_rpc"}
    answered = {path: raw_post(served.port, path, body) for path in OUTSIDE}
    assert {path: status for path, (status, _) in answered.items() if status != 404} == {}
    assert all("not an inference route" in text and len(text) < 400 for _, text in answered.values())
    assert chat.paths == []  # nothing reached the model's server
    for path, route in INSIDE.items():
        status, text = raw_post(served.port, path, body)
        assert status == 200 and "hello" in text, (path, text)
        assert chat.paths[-1] == route, path
    assert set(chat.paths) <= set(INFERENCE_ROUTES)
    assert all(headers["Authorization"] == "Bearer the-vllm-servers-own-key" for headers in chat.headers)


def test_the_pool_proxy_passes_on_the_allowlist_only_whatever_the_spelling(serve, proxied):  # noqa: F811
    servers = [serve()]
    proxy, _, _ = proxied(servers)
    port = int(proxy.base_url.removesuffix("/v1").rsplit(":", 1)[1])
    answered = {path: raw_post(port, path, CHAT, token=proxy.api_key)[0] for path in OUTSIDE}
    assert {path: status for path, status in answered.items() if status != 404} == {}
    assert servers[0].seen == []
    for path, route in INSIDE.items():
        assert raw_post(port, path, CHAT, token=proxy.api_key)[0] == 200, path
        assert servers[0].seen[-1][0] == route, path
