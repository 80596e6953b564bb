"""`Model` (any OpenAI-compatible endpoint) and `TrainableModel` (a LoRA trained by a backend)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
from openai import AsyncOpenAI
from pydantic import BaseModel, Field, PrivateAttr

from .config import TrainConfig, TrainerConfig
from .errors import AutoRLError
from .serving.embedded import DEFAULT_BASE_MODEL
from .trajectories import TrajectoryGroup

if TYPE_CHECKING:
    from .backends.base import Backend


INFERENCE_TIMEOUT = httpx.Timeout(600, connect=10)
"""How long a request to the policy may take (a long completion on a CPU), and to connect."""


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

    async def register(self, backend: Backend) -> None:
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
        """The httpx client of this model's OpenAI clients, over its backend's transport (`Backend.transport`:
        a trainable model's requests wait while it trains and are sent again once a server that died was
        recovered; plain HTTP for a model without a backend). `wrap` wraps that transport (autorl.langgraph
        records the calls through it)."""
        transport = self._transport()
        return httpx.AsyncClient(transport=wrap(transport) if wrap else transport, timeout=INFERENCE_TIMEOUT)

    def _transport(self) -> httpx.AsyncBaseTransport:
        return httpx.AsyncHTTPTransport()

    def get_inference_name(self) -> str:
        """The model name to pass as `model=` in chat completion requests."""
        return self.inference_model_name or self.name


class TrainableModel(Model):
    """A policy: `base_model` plus a LoRA that `train()` updates through the registered backend."""

    base_model: str = DEFAULT_BASE_MODEL
    """`embedded:<name>` or a local Hugging Face model directory."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """LoRA shape, training dtype and seed."""
    _backend: Backend | None = PrivateAttr(default=None)

    async def register(self, backend: Backend) -> None:
        """Start serving this model on `backend` (e.g. `LocalBackend()`), resuming its newest checkpoint."""
        await backend.register(self)
        self._backend = backend

    def _transport(self) -> httpx.AsyncBaseTransport:
        return self._require_backend().transport(self)

    def _require_backend(self) -> Backend:
        if self._backend is None:
            raise AutoRLError(f"model {self.name!r} is not registered; call `await model.register(backend)` first")
        return self._backend

    async def train(self, trajectory_groups: list[TrajectoryGroup], config: TrainConfig | None = None) -> dict:
        """One GRPO update from scored groups; returns the step's metrics (also in history.jsonl)."""
        return await self._require_backend().train(self, list(trajectory_groups), config or TrainConfig())

    async def get_step(self) -> int:
        """The newest trained step (0 before any training)."""
        return await self._require_backend().get_step(self)
