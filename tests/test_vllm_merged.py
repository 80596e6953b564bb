"""Integration: a real vLLM server in merged mode reloads merged LoRA weights in place, and back; and it lets
no request in without its key but its health check, its development endpoints included."""

import tempfile
from pathlib import Path

import httpx
import pytest
from test_merge import random_lora

from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # about 125 s on 2 cores
STARTUP_TIMEOUT_S = 180
"""Inside the test's limit: a server that does not come up fails with its log's tail."""
REQUEST_TIMEOUT_S = 60
PROMPTS = ["What is the capital of France?", "List three fruits."]
GUARDED = [
    ("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
    ("POST", "/v1/load_lora_adapter"), ("GET", "/metrics"), ("GET", "/server_info"), ("GET", "/version"),
    ("POST", "/tokenize"), ("POST", "/invocations"), ("GET", "/openapi.json"), ("GET", "/docs"),
    ("POST", "/pause"), ("POST", "/resume"), ("POST", "/collective_rpc"), ("POST", "/reset_prefix_cache"),
    ("GET", "/is_paused"),
]  # fmt: skip
"""What vLLM answers, its development endpoints (on in merged serving) included: vLLM's own --api-key guards
only /v1 (measured: with VLLM_API_KEY set, /invocations, /server_info, /metrics and /pause answered without it)."""


def greedy(server: VLLMServer) -> list[str]:
    replies = []
    for prompt in PROMPTS:
        response = httpx.post(
            server.base_url + "/chat/completions",
            json={
                "model": server.served_name,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 16,
                "temperature": 0,
            },
            headers=server.headers,
            timeout=REQUEST_TIMEOUT_S,
        )
        response.raise_for_status()
        replies.append(response.json()["choices"][0]["message"]["content"])
    return replies


def test_merged_server_serves_a_merged_lora_and_returns_to_the_base_weights(tmp_path):
    model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
    adapter = random_lora(model_dir, tmp_path / "lora", r=8, lora_alpha=16)
    server = VLLMServer(
        model_dir,
        "policy",
        tmp_path / "vllm.log",
        ServerConfig(lora_serving="merged", startup_timeout_s=STARTUP_TIMEOUT_S),
    )

    def merged_dirs() -> set[Path]:  # where load_merged may write: /dev/shm, or the temporary directory
        return {p for d in ("/dev/shm", tempfile.gettempdir()) for p in Path(d).glob("autorl-merged-*")}

    left = merged_dirs()
    with server:
        root = server.base_url.removesuffix("/v1")
        for method, path in GUARDED:  # no key, a wrong key: refused before vLLM sees the request
            for headers in ({}, {"Authorization": "Bearer autorl-local"}):
                answer = httpx.request(method, root + path, headers=headers, json={}, timeout=REQUEST_TIMEOUT_S)
                assert answer.status_code == 401, (method, path, headers)
        assert httpx.get(root + "/health", timeout=REQUEST_TIMEOUT_S).status_code == 200
        assert httpx.get(root + "/metrics", headers=server.headers, timeout=REQUEST_TIMEOUT_S).status_code == 200
        base = greedy(server)
        server.load_merged(adapter)
        merged = greedy(server)
        assert merged != base  # the prefix cache from the base weights was not reused either
        assert merged_dirs() == left  # the server holds its own copy; no file stays
        server.load_merged(None)
        assert greedy(server) == base
