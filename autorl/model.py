"""`Model` (any OpenAI-compatible endpoint) and `TrainableModel` (a LoRA trained by a backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from openai import AsyncOpenAI
from pydantic import BaseModel, Field, PrivateAttr

from .config import TrainConfig, TrainerConfig
from .embedded import DEFAULT_BASE_MODEL
from .errors import AutoRLError
from .trajectories import TrajectoryGroup


class InferenceGate:
    """Holds back requests to the policy while a training step runs, and asks the backend to recover a
    server that requests cannot reach."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self.recover: Callable[[], Awaitable[bool]] | None = None
        """Set by the backend: restarts the model's server if it died; True when a retry may succeed."""
        self.transport: Callable[[], httpx.AsyncBaseTransport] | None = None
        """Set by a backend whose model has no one server (`ClusterBackend`): makes the transport that sends
        each request to one of its replicas (and sends it again if that one died); None: plain HTTP."""

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    async def wait(self) -> None:
        await self._open.wait()


INFERENCE_TIMEOUT = httpx.Timeout(600, connect=10)
"""How long a request to the policy may take (a long completion on a CPU), and to connect."""
RECOVERY_RETRIES = 2
"""Times one request is sent again after its server was found dead and recovered."""
CUT_OFF = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)
"""What a request to a server that died raises: it is sent again once the server is back (or, on a cluster, to
another replica)."""
ENGINE_DIED = b"EngineCore encountered an issue"
"""What vLLM answers (HTTP 500) to the requests it holds when its engine process died (killed, as the OOM killer
does, or stopped with the server's process group): the server is going away, so such a request counts as cut off."""


async def unless_engine_died(response: httpx.Response, request: httpx.Request) -> httpx.Response:
    """`response` as it is, or read whole if it is a 500 (an error body is small); raises `httpx.RemoteProtocolError`
    (one of `CUT_OFF`) when that 500 says the server's engine died (`ENGINE_DIED`)."""
    if response.status_code != 500:
        return response
    response = httpx.Response(500, headers=response.headers, content=await response.aread())
    if ENGINE_DIED in response.content:
        raise httpx.RemoteProtocolError("the vLLM server's engine died", request=request)
    return response


class _GatedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that waits for the gate before each request, and sends a request again when it
    could not reach the server, was cut off or was told the server's engine died (`CUT_OFF`, `ENGINE_DIED`) and
    the gate's `recover` brought the server back."""

    def __init__(self, gate: InferenceGate, inner: httpx.AsyncBaseTransport | None = None):
        self._gate = gate
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        retries = 0
        while True:
            await self._gate.wait()
            try:
                return await unless_engine_died(await self._inner.handle_async_request(request), request)
            except CUT_OFF:
                retries += 1
                if retries > RECOVERY_RETRIES or self._gate.recover is None or not await self._gate.recover():
                    raise

    async def aclose(self) -> None:
        await self._inner.aclose()


class Model(BaseModel):
    """A model behind an OpenAI-compatible endpoint (an API model, or a judge); not trained."""

    name: str
    """Unique name of the model inside its project."""
    project: str = "default"
    """Groups runs; the run directory is `<backend path>/<project>/<name>`."""
    inference_base_url: str | None = None
    """OpenAI-compatible base URL (ends in /v1)."""
    inference_api_key: str | None = Field(default=None, repr=False)
    """API key for the endpoint; never written to an artifact or a log."""
    inference_model_name: str | None = None
    """Model name to request from the endpoint; defaults to `name`."""
    _gate: InferenceGate = PrivateAttr(default_factory=InferenceGate)

    async def register(self, backend: Any) -> None:
        """Attach to a backend; a plain `Model` needs nothing from it."""

    def openai_client(self, **kwargs: Any) -> AsyncOpenAI:
        """An `openai.AsyncOpenAI` bound to this model's endpoint (held back while the model trains)."""
        return AsyncOpenAI(
            base_url=self.require_endpoint(),
            api_key=self.inference_api_key or "none",
            http_client=self.http_client(),
            **kwargs,
        )

    def require_endpoint(self) -> str:
        """The model's OpenAI-compatible base URL; one clear error if it has none yet."""
        if self.inference_base_url is None:
            raise AutoRLError(f"model {self.name!r} has no inference endpoint; register it with a backend first")
        return self.inference_base_url

    def http_client(
        self, wrap: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport] | None = None
    ) -> httpx.AsyncClient:
        """The httpx client of this model's OpenAI clients: requests wait while the model trains and are sent
        again once a server that died was recovered. `wrap` wraps that transport (autorl.langgraph records
        the calls through it)."""
        inner = self._gate.transport() if self._gate.transport else None
        transport: httpx.AsyncBaseTransport = _GatedTransport(self._gate, inner)
        return httpx.AsyncClient(transport=wrap(transport) if wrap else transport, timeout=INFERENCE_TIMEOUT)

    def get_inference_name(self) -> str:
        """The model name to pass as `model=` in chat completion requests."""
        return self.inference_model_name or self.name


class TrainableModel(Model):
    """A policy: `base_model` plus a LoRA that `train()` updates through the registered backend."""

    base_model: str = DEFAULT_BASE_MODEL
    """`embedded:<name>` or a local Hugging Face model directory."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """LoRA shape, training dtype and seed."""
    _backend: Any = PrivateAttr(default=None)

    async def register(self, backend: Any) -> None:
        """Start serving this model on `backend` (e.g. `LocalBackend()`), resuming its newest checkpoint."""
        await backend.register(self)
        self._backend = backend

    def _require_backend(self) -> Any:
        if self._backend is None:
            raise AutoRLError(f"model {self.name!r} is not registered; call `await model.register(backend)` first")
        return self._backend

    async def train(self, trajectory_groups: list[TrajectoryGroup], config: TrainConfig | None = None) -> dict:
        """One GRPO update from scored groups; returns the step's metrics (also in history.jsonl)."""
        return await self._require_backend().train(self, list(trajectory_groups), config or TrainConfig())

    async def get_step(self) -> int:
        """The newest trained step (0 before any training)."""
        return await self._require_backend().get_step(self)
