"""`autorl serve`'s real app on 127.0.0.1 (uvicorn in a thread) over a `LocalBackend` whose models train for real on
the tiny model and are served by a scripted OpenAI endpoint in place of vLLM, and raw requests to it: what
the remote backend, serve security and fuzz tests share."""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

import autorl as art
from autorl.atomic import private_dir
from autorl.backends.local import LocalPlacement
from autorl.backends.remote.app import make_app
from autorl.backends.remote.config import MODELS_DIR, ServeConfig
from autorl.backends.remote.limits import ServeLimits
from autorl.backends.remote.served import ServedModels
from autorl.backends.remote.wire import CLIENT_HEADER
from autorl.config import TrainerConfig
from autorl.serving.auth import bearer
from autorl.serving.config import ServerConfig
from autorl.training.checkpoints import METRICS_FILE, checkpoint_name, missing_checkpoint
from tests.helpers.chat_server import ChatCompletionServer, completion

TOKEN = secrets.token_urlsafe(32)
MAX_BODY = 2 * 2**20
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


class ScriptedServing:
    """A model's serving without vLLM: requests go to a scripted OpenAI endpoint; checkpoint N is "served"
    as `lora-N`, under the endpoint's own key (which clients of `autorl serve` never see)."""

    api_key = "the-vllm-servers-own-key"

    def __init__(self, base_url: str, run_dir: Path):
        self.base_url = base_url
        self.checkpoints = run_dir / "checkpoints"

    def transport(self):
        return None

    async def serve(self, step: int) -> str:
        if step and not (self.checkpoints / checkpoint_name(step) / METRICS_FILE).is_file():
            raise missing_checkpoint("agent", step, self.checkpoints)
        return f"lora-{step}"

    async def retire(self, step):
        pass

    def served_steps(self):
        return set()

    async def recover(self):
        return False

    def close(self):
        pass


class ScriptedPlacement(LocalPlacement):
    """A `LocalPlacement` (the real trainer on a thread) whose models are served by `ScriptedServing`."""

    def __init__(self, chat: ChatCompletionServer, server: ServerConfig):
        super().__init__(server)
        self.chat = chat

    async def start_serving(self, model, run_dir):
        return ScriptedServing(self.chat.base_url, run_dir)


class Harness:
    """The server's app on 127.0.0.1 in a thread of its own (its own event loop, as uvicorn runs it)."""

    def __init__(
        self,
        home: Path,
        chat: ChatCompletionServer,
        port: int = 0,
        lease_s: float = 60,
        serving="adapter",
        limits=None,
        options: ServeConfig | None = None,
    ):
        self.chat = chat
        """The scripted endpoint the models' requests reach (`chat.paths`: what was sent on)."""
        config = ServerConfig(lora_serving=serving)
        backend = art.LocalBackend(home / MODELS_DIR, server=config, layout="run")  # autorl serve's (server.py)
        backend.placement = ScriptedPlacement(chat, config)
        self.served = ServedModels(backend, private_dir(home / "serve"), lease_s, with_test_models(limits, home))
        app = make_app(self.served, TOKEN, MAX_BODY)
        options = options or ServeConfig(home=home)  # as `autorl serve` starts uvicorn (TLS included)
        self.server = uvicorn.Server(uvicorn.Config(app, **{**options.uvicorn_options(), "port": port}))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the app did not start"
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"{options.url.partition(':')[0]}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def with_test_models(limits: ServeLimits | None, home: Path) -> ServeLimits:
    """`limits` whose model roots hold the session's temporary directories (`home`'s parent), where
    `tiny_model` is: `autorl serve` takes no other path as a base model (`ServeLimits.model_roots`)."""
    limits = limits or ServeLimits()
    return limits.model_copy(update={"model_roots": [*limits.model_roots, home.parent]})


def trainable(tiny_model) -> art.TrainableModel:
    return art.TrainableModel(
        name="agent", project="remote", base_model=str(tiny_model), trainer=TrainerConfig(dtype="float32")
    )


def call(method: str, url: str, key: str | None = TOKEN, **kwargs) -> httpx.Response:
    headers = {**(bearer(key) if key else {}), CLIENT_HEADER: "a-test-client", **kwargs.pop("headers", {})}
    return httpx.request(method, url, headers=headers, timeout=60, **kwargs)


def register_body(tiny_model, **fields) -> dict:
    return {"name": "agent", "project": "remote", "base_model": str(tiny_model), **fields}


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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def chat():
    server = ChatCompletionServer(lambda body: completion(body, "hello"))
    yield server
    server.close()


@pytest.fixture
def served(tmp_path, chat):
    harness = Harness(tmp_path, chat)
    yield harness
    harness.stop()
