"""Integration: a real vLLM server in merged mode reloads merged LoRA weights in place, and back."""

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
        base = greedy(server)
        server.load_merged(adapter)
        merged = greedy(server)
        assert merged != base  # the prefix cache from the base weights was not reused either
        assert merged_dirs() == left  # the server holds its own copy; no file stays
        server.load_merged(None)
        assert greedy(server) == base
