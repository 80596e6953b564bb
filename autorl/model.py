"""`Model` (any OpenAI-compatible endpoint) and `TrainableModel` (a LoRA trained by a backend)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import httpx
from openai import AsyncOpenAI
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator

from .config import TrainConfig, TrainerConfig
from .errors import AutoRLError
from .serving.config import ServerConfig
from .serving.embedded import DEFAULT_BASE_MODEL
from .training.checkpoints import checkpoint_name
from .trajectories import Trajectory, TrajectoryGroup
from .types import TrainResult, TrainSFTConfig

if TYPE_CHECKING:
    from .backends.base import Backend
    from .dev import TrainConfig as DevTrainConfig


INFERENCE_TIMEOUT = httpx.Timeout(600, connect=10)
"""How long a request to the policy may take (a long completion on a CPU), and to connect."""
ModelConfig = TypeVar("ModelConfig", bound=BaseModel | None)
"""The type of a model's own `config` (ART's `Model[MyConfig]`)."""
log = logging.getLogger("autorl")


class Model(BaseModel, Generic[ModelConfig]):
    """A model behind an OpenAI-compatible endpoint (an API model, or a judge); not trained."""

    name: str
    """Unique name of the model inside its project."""
    project: str = "default"
    """Groups runs; the model's directory is `<backend path>/<project>/models/<name>` (ART's layout,
    `autorl.utils.output_dirs`; `autorl run`'s is `<backend path>/<project>/<name>`)."""
    config: ModelConfig | None = None
    """Your own settings of the model (any pydantic model, e.g. the rollout's max turns), kept with it for
    rollout code to read; autorl reads nothing of it. Registering refuses one that is not JSON-serialisable."""
    inference_base_url: str | None = None
    """OpenAI-compatible base URL (ends in /v1)."""
    inference_api_key: str | None = Field(default=None, repr=False, exclude=True)
    """API key for the endpoint; never written to an artifact or a log."""
    inference_model_name: str | None = None
    """Model name to request from the endpoint; defaults to `name`."""
    report_metrics: list[str] | None = None
    """Where the backend reports the model's metrics (training steps, `log`) besides its run directory:
    None, to W&B when WANDB_API_KEY is set (as ART); ["wandb"], to W&B always; [], nowhere. W&B writes
    offline files under the run directory unless WANDB_MODE says otherwise. "mlflow" and "tensorboard" are
    trackers too (`autorl.tracking`)."""
    _backend: Backend | None = PrivateAttr(default=None)

    async def register(self, backend: Backend) -> None:
        """Attach to a backend, where `log` records (a plain `Model` starts nothing there)."""
        self._check_config()
        self._backend = backend

    def _check_config(self) -> None:
        if self.config is not None:
            try:
                self.config.model_dump_json()
            except Exception as exc:  # pydantic's serialisation errors differ by type
                raise AutoRLError(f"model {self.name!r}: its config cannot be written as JSON ({exc})") from None

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

    def get_inference_name(self, step: int | None = None) -> str:
        """The model name to pass as `model=` in chat completion requests. `step` (ART's argument, as an
        `eval_fn` of `PipelineTrainer` passes it): a check that the served checkpoint is that one where the served
        name says which it is (adapter serving's `<name>@NNNN`; merged serving serves one checkpoint under one
        name); another is one error line (serve it with `await backend.serve_checkpoint(model, step)`)."""
        name = self.inference_model_name or self.name
        if step is not None and "@" in name and not name.endswith(f"@{checkpoint_name(step)}"):
            raise AutoRLError(
                f"model {self.name!r} serves {name!r}, not checkpoint {checkpoint_name(step)}; serve that one with "
                "`await backend.serve_checkpoint(model, step)` and pass the name it returns"
            )
        return name

    def litellm_completion_params(self, step: int | None = None) -> dict[str, Any]:
        """`litellm.completion` / `dspy.LM` keyword arguments for this model: `model`, `base_url`, `api_key` and
        `temperature` 1. A trainable model's name goes to LiteLLM's OpenAI-compatible vLLM provider
        (`hosted_vllm/<name>`). Such calls bypass `openai_client`'s transport: they are not held back while
        the model trains. `step`: None, the served checkpoint; a step is checked as `get_inference_name(step)`
        checks it: serve another with `await backend.serve_checkpoint(model, step)` and pass the name it returns."""
        name = self.get_inference_name(step)
        return {
            "model": f"hosted_vllm/{name}" if isinstance(self, TrainableModel) else name,
            "base_url": self.require_endpoint(),
            "api_key": self.inference_api_key or "none",
            "temperature": 1,
        }

    def _require_backend(self) -> Backend:
        if self._backend is None:
            raise AutoRLError(f"model {self.name!r} is not registered; call `await model.register(backend)` first")
        return self._backend

    async def log(
        self,
        trajectories: Iterable[Trajectory | BaseException] | Iterable[TrajectoryGroup] | None = None,
        split: str = "val",
        *,
        metrics: dict[str, float] | None = None,
        step: int | None = None,
    ) -> dict[str, float]:
        """Record a batch of `split` ("val", "train", "test", ...) at the model's current step (or `step`):
        its reward mean (`<split>/reward`), the mean within-group standard deviation (`reward_std_dev`), the
        share of rollouts that raised (`exception_rate`), the mean of every metric the trajectories carry,
        and `metrics` as given. `trajectories`: trajectories (with exceptions, as `gather_trajectories`
        returns them with max_exceptions), which form one group, or groups. Written to the run directory's
        `log_history.jsonl` and `trajectories/<split>/NNNN.parquet` (ART's format), and to W&B (`report_metrics`);
        `delete_checkpoints` picks the best checkpoint by these. With no trajectories, `metrics` alone, as ART's
        `await model.log(metrics=result.metrics, step=result.step)` after `backend.train`. Returns the metrics
        recorded."""
        items = list(trajectories or [])
        if any(isinstance(item, Trajectory | BaseException) for item in items):
            groups = [TrajectoryGroup(items)]
        else:
            groups = [g if isinstance(g, TrajectoryGroup) else TrajectoryGroup(g) for g in items]
        return await self._require_backend().log(self, groups, split, dict(metrics or {}), step)


class TrainableModel(Model[ModelConfig], Generic[ModelConfig]):
    """A policy: `base_model` plus a LoRA that `train()` updates through the registered backend."""

    base_model: str = DEFAULT_BASE_MODEL
    """`embedded:<name>` or a local Hugging Face model directory."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """LoRA shape, training dtype and seed."""
    server: dict[str, Any] = Field(default_factory=dict)
    """`ServerConfig` fields that this model's vLLM server takes over the backend's (e.g. `{"max_model_len":
    4096}`); ART's `_internal_config` engine arguments land here. Read when the server starts."""
    lora_config: dict[str, Any] | None = None
    """ART's LoRA settings (`art.dev.LoRAConfig`: `rank`, `alpha`, `target_modules`, `dropout`, `random_state`),
    set on `trainer` at construction; a key autorl has no setting for is an error naming it."""
    _internal_config: dict[str, Any] | None = PrivateAttr(default=None)

    def __init__(self, **data: Any):
        internal = data.pop("_internal_config", None)
        super().__init__(**data)
        if self.lora_config:
            from .dev import lora_config_updates

            self.trainer = TrainerConfig.model_validate(
                {**self.trainer.model_dump(), **lora_config_updates(self.lora_config)}
            )
        if internal:
            self._internal_config = internal

    def __setattr__(self, name: str, value: Any) -> None:
        """`model._internal_config = ...` (as ART's examples set it after construction) lands where the keyword
        does: its engine arguments on `server` (a `server` field set explicitly wins), its LoRA arguments on
        `trainer`. Set once the model is registered, it would not reach the running server: one error line."""
        if name == "_internal_config" and value:
            if self._backend is not None:
                raise AutoRLError(
                    f"model {self.name!r}: set _internal_config before `await model.register(backend)` (its server "
                    "and trainer are made from it there)"
                )
            from .dev import internal_config_updates

            server, trainer = internal_config_updates(value)
            self.server = self._server_fields({**server, **self.server})
            if trainer:
                self.trainer = TrainerConfig.model_validate({**self.trainer.model_dump(), **trainer})
        super().__setattr__(name, value)

    @field_validator("server")
    @classmethod
    def _server_fields(cls, server: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(server) - set(ServerConfig.model_fields))
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a ServerConfig field")
        try:  # each value as the server will read it, now: a bad one is this line, not a server that fails to start
            ServerConfig.model_validate(server)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}") from None
        return server

    async def register(self, backend: Backend, _openai_client_config: dict[str, Any] | None = None) -> None:
        """Start serving this model on `backend` (e.g. `LocalBackend()`), resuming its newest checkpoint. A
        second model of the same name on the same backend shares the first one's server and training.

        _openai_client_config: ART's server settings (`{"engine_args": {...}, "server_args": {...}}`), set on
            `server` (`autorl.dev.openai_server_config_updates`); a key autorl has no setting for is one
            `UnsupportedArgumentError` line naming it."""
        self._check_config()
        if _openai_client_config:
            from .dev import openai_server_config_updates

            self.server = self._server_fields({**self.server, **openai_server_config_updates(_openai_client_config)})
        await backend.register(self)
        self._backend = backend

    def _transport(self) -> httpx.AsyncBaseTransport:
        return self._require_backend().transport(self)

    async def train(
        self,
        trajectory_groups: Iterable[TrajectoryGroup],
        config: TrainConfig | None = None,
        _config: DevTrainConfig | dict[str, Any] | None = None,
        verbose: bool = False,
    ) -> dict:
        """One GRPO update from scored groups (older ART code's call; ART 2026 programs call
        `await backend.train(model, groups, learning_rate=...)`, which this goes through); returns the step's
        metrics, with `step` (also in history.jsonl).

        _config: ART's expert settings (`autorl.dev.TrainConfig`), mapped onto `config`'s fields; an ART
            key autorl has no setting for is a warning, any other key an error naming it.
        verbose: log the step's metrics (logger `autorl`, INFO).
        """
        config = config or TrainConfig()
        if _config:
            from .dev import train_config_updates

            config = TrainConfig.model_validate(
                {**config.model_dump(exclude_unset=True), **train_config_updates(_config)}
            )
        result = await self._require_backend().train(self, list(trajectory_groups), config, verbose=verbose)
        return {"step": result.step, **result.metrics}

    async def train_sft(
        self,
        trajectories: Iterable[Trajectory],
        config: TrainSFTConfig | None = None,
        _config: dict[str, Any] | None = None,
        verbose: bool = False,
    ) -> TrainResult:
        """Supervised fine-tuning on whole trajectories (ART's `model.train_sft`): a LoRA step on their assistant
        turns, tools and multi-turn included, at `config`'s learning rate per batch (a schedule:
        `autorl.utils.sft.create_sft_dataset_iterator`). Its checkpoint is the model's next step, served as any
        other; RL continues from it. Returns the step, its metrics and its checkpoint.

        _config: ART's experimental SFT settings (metric logging); autorl records every step's metrics in
            history.jsonl anyway, so any given is one warning line and changes nothing.
        """
        if _config:
            log.warning("train_sft(_config=...): not supported by autorl, ignored: %s", ", ".join(sorted(_config)))
        return await self._require_backend().train_sft(self, trajectories, config, verbose=verbose)

    async def get_step(self) -> int:
        """The newest trained step (0 before any training)."""
        return await self._require_backend().get_step(self)

    async def delete_checkpoints(
        self, best_checkpoint_metric: str = "val/reward", *, keep: str = "latest,best"
    ) -> list[int]:
        """Delete the checkpoints that `keep` does not name, as ART does before each `train`; returns the steps
        deleted.

        keep: "latest,best" (ART's: the newest and the best), or "latest:N", "every:N", "all" and
            combinations (`autorl.backends.retention.KeepPolicy`). The newest checkpoint and any a server
            serves are never deleted.
        best_checkpoint_metric: what "best" means: a metric `log` recorded (`val/reward`: the highest mean
            validation reward), or `train/<metric>` of the training steps; with none recorded for any
            checkpoint, the training reward, with a warning.
        """
        return await self._require_backend().delete_checkpoints(self, best_checkpoint_metric, keep)
