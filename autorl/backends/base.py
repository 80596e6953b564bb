"""The `Backend` interface that `TrainableModel` is typed against, the interfaces of what a `ModelBackend`
runs (`Placement`, `Serving`, `Trainer`), and `TrainingCalls`, ART's training calls shared by every backend.

A backend registers models (starts serving them), trains them one GRPO step at a time, records evaluation
batches (`log`), deletes checkpoints by a policy, serves any of their checkpoints, and gives their OpenAI
clients the transport that reaches its servers. Its methods take and return plain data (models, groups,
names, numbers), so a backend in another process answers them the same. `ModelBackend`
(`autorl.backends.model_backend`) is the training loop of the backends that run their own servers and
trainer; where those run is its `Placement`'s: this machine (`autorl.backends.local`) or a Ray cluster
(`autorl.backends.cluster`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from .. import tracing
from ..activity import activity
from ..config import TrainConfig
from ..errors import AutoRLError
from ..training.checkpoints import checkpoint_name
from ..trajectories import Trajectory, TrajectoryGroup
from ..types import TrainResult, TrainSFTConfig

if TYPE_CHECKING:
    from ..model import Model, TrainableModel

log = logging.getLogger("autorl")


def inference_name(model_name: str, step: int) -> str:
    """The name a server serves the LoRA of `step` under (adapter serving): `name@NNNN`."""
    return f"{model_name}@{checkpoint_name(step)}"


@runtime_checkable
class Backend(Protocol):
    """What a `TrainableModel` needs from where it is served and trained."""

    async def register(self, model: TrainableModel) -> None:
        """Start serving `model` (its newest checkpoint, if it has one) and set its inference endpoint."""
        ...

    async def train(
        self, model: TrainableModel, trajectory_groups: Iterable[TrajectoryGroup], config: TrainConfig | None = None,
        **keywords: Any,
    ) -> TrainResult:  # fmt: skip
        """One GRPO step from scored groups, with ART's keywords (`TrainingCalls.train`)."""
        ...

    async def train_step(self, model: TrainableModel, groups: list[TrajectoryGroup], config: TrainConfig) -> dict:
        """One GRPO step from scored groups; returns the step's metrics, with `step`."""
        ...

    async def train_sft(
        self, model: TrainableModel, trajectories: Iterable[Trajectory], config: TrainSFTConfig | None = None,
        *, verbose: bool = False,
    ) -> TrainResult:  # fmt: skip
        """One supervised step on whole trajectories (`TrainingCalls.train_sft`)."""
        ...

    async def sft_step(self, model: TrainableModel, trajectories: list[Trajectory], config: TrainSFTConfig) -> dict:
        """One supervised step; returns its metrics, with `step`."""
        ...

    async def get_step(self, model: TrainableModel) -> int:
        """The newest trained step (0 before any training)."""
        ...

    async def serve_checkpoint(self, model: TrainableModel, step: int) -> str:
        """The name under which checkpoint `step` (0: the base model) is served, loading it if needed."""
        ...

    async def log(
        self, model: Model, groups: list[TrajectoryGroup], split: str, metrics: dict[str, float], step: int | None
    ) -> dict[str, float]:
        """Record an evaluation batch of `split` at `step` (None: the model's newest; 0 for a model that is
        not trained) with `metrics` beside the ones computed from `groups`; returns what was recorded."""
        ...

    async def delete_checkpoints(self, model: TrainableModel, best_checkpoint_metric: str, keep: str) -> list[int]:
        """Delete the checkpoints that the policy `keep` (`KeepPolicy`) leaves out, "best" by
        `best_checkpoint_metric`; never the newest nor one being served. Returns the steps deleted."""
        ...

    async def recover(self, model: TrainableModel) -> bool:
        """Bring the model's server back if it died; whether a request that failed to reach it may be sent again."""
        ...

    def transport(self, model: TrainableModel) -> httpx.AsyncBaseTransport:
        """The httpx transport of the model's OpenAI clients: held back while it trains, and resent to a server
        that was recovered."""
        ...

    def close(self) -> None:
        """Stop everything the backend started."""
        ...

    def run_dir(self, model: Model) -> Path:
        """The model's run directory on this machine: history, checkpoints, logs (for a remote backend, its copy)."""
        ...

    @property
    def remote_server_starts(self) -> int:
        """vLLM servers started on other machines for this backend's models (a run records them)."""
        ...

    # What the pipeline needs to know of where its policy runs, asked of the backend instead of read from its class.

    def check_can_start(self, model: TrainableModel) -> None:
        """Raise one `AutoRLError` line, before anything expensive starts, when `model` cannot be served here (a
        base model that does not resolve, a port in use, a server that does not answer)."""
        ...

    def serves_adapters(self) -> bool:
        """Whether each checkpoint is served as a vLLM LoRA (adapter serving), the base weights staying
        servable, rather than merged into the weights."""
        ...

    def starts_embedded_apart(self) -> bool:
        """Whether the embedded model's plain weights need a vLLM server of their own beside the policy's: the
        policy's server cannot serve them (merged serving holds one checkpoint's weights; a server elsewhere
        is not this machine's)."""
        ...

    def shares_cpu_with_embedded(self) -> bool:
        """Whether the policy's vLLM engine and the embedded model's are two engines on this machine's CPU,
        which slow each other down when both decode at once."""
        ...


class Serving(Protocol):
    """One model's inference, as a `Placement` runs it: a vLLM server, or a pool of replicas."""

    base_url: str
    """The OpenAI-compatible base URL the model's clients send to."""
    api_key: str
    """The key the model's clients send (`autorl.serving.auth`): its server's own, which only they get."""

    def transport(self) -> httpx.AsyncBaseTransport | None:
        """What sends the model's requests (None: plain HTTP to `base_url`)."""
        ...

    async def serve(self, step: int) -> str:
        """Serve checkpoint `step` (0: the base model); returns the name to request it under."""
        ...

    async def retire(self, step: int) -> None:
        """Checkpoint `step` is about to be deleted (`delete_checkpoints`, a rollback): stop serving it, freeing
        what it holds, if anything. Until then every checkpoint served once stays servable under its name, so a
        rollout that named one before a training step may still send its requests after the step."""
        ...

    def served_steps(self) -> set[int]:
        """The checkpoint served now, the one `serve` was last asked for (never deleted while it is)."""
        ...

    async def recover(self) -> bool:
        """Restart what died; whether a request that failed may be sent again."""
        ...

    def close(self) -> None: ...


class Trainer(Protocol):
    """One model's trainer, as a `Placement` runs it: on a thread here, or in a Ray actor."""

    async def step(self, groups: list[TrajectoryGroup], config: TrainConfig, step: int) -> dict:
        """One GRPO update; returns its metrics once checkpoint `step` is complete in the run directory."""
        ...

    async def sft(self, trajectories: list[Trajectory], config: TrainSFTConfig, step: int) -> dict:
        """One supervised step (`GRPOTrainer.sft_step`); returns its metrics once checkpoint `step` is complete."""
        ...

    def close(self) -> None: ...


class Placement(Protocol):
    """Where a `ModelBackend` runs its models' servers and trainers."""

    remote_server_starts: int
    """vLLM servers started in other processes (on a cluster); this process's own are `VLLMServer.starts`."""

    async def start_serving(self, model: TrainableModel, run_dir: Path) -> Serving:
        """Start serving `model`'s base weights (checkpoints are served later with `Serving.serve`)."""
        ...

    def trainer(self, model: TrainableModel, run_dir: Path) -> Trainer:
        """The model's trainer, made at its first training step; it resumes from the newest checkpoint."""
        ...

    def close(self) -> None:
        """Stop what the placement started besides the models' servers and trainers."""
        ...


class TrainingCalls:
    """ART's training calls of a backend (`backend.train(model, groups, learning_rate=...)`), one implementation
    for every backend over its `train_step`: the keywords mapped onto a `TrainConfig`
    (`autorl.dev.train_keywords`), the step, and a `TrainResult`."""

    async def train(
        self, model: TrainableModel, trajectory_groups: Iterable[TrajectoryGroup], config: TrainConfig | None = None,
        **keywords: Any,
    ) -> TrainResult:  # fmt: skip
        """One GRPO step of `model` from scored groups; returns the step, its metrics and its checkpoint.

        config: autorl's `TrainConfig` (older ART code's `model.train(groups, config=...)` comes here with it).
        keywords: ART's keywords (`learning_rate`, `epsilon`, `epsilon_high`, `importance_sampling_level`,
            `scale_rewards`, `kl_penalty_coef`, `loss_fn`, `verbose`, ...) and any `TrainConfig` field, over
            `config`; one with no autorl setting is one `UnsupportedArgumentError` line naming it (see
            `autorl.dev.train_keywords`).

        As ART's, it logs nothing: record what you want with `model.log(groups, split="train")` and
        `model.log(metrics=result.metrics, step=result.step)`. (`history.jsonl` keeps every step's metrics.)
        With tracing on (`autorl.tracing`) the step is an `autorl.update` span under the current span: the
        training loops' step span, synchronous or pipelined, and a user's own.
        """
        from ..dev import train_keywords

        resolved, verbose, save_checkpoint = train_keywords(config, keywords)
        if not save_checkpoint:
            log.warning("backend.train(save_checkpoint=False): autorl's step is its checkpoint; it is written")
        groups = list(trajectory_groups)
        with tracing.span("autorl.update", {"autorl.groups": len(groups)}) as span, activity("training"):
            metrics = dict(await self.train_step(model, groups, resolved))
            tracing.set_attributes(span, {"autorl.step": metrics["step"], **tracing.update_attributes(metrics)})
        return self._result(model, metrics, verbose, "trained")

    async def train_sft(
        self,
        model: TrainableModel,
        trajectories: Iterable[Trajectory],
        config: TrainSFTConfig | None = None,
        *,
        verbose: bool = False,
    ) -> TrainResult:
        """One supervised fine-tuning step of `model` (ART's `train_sft`): a LoRA update on the assistant turns of
        whole trajectories (multi-turn and tool calls included), one optimizer step per batch of `config` at its
        learning rate; its checkpoint is the model's next step, served as any other, and RL continues from it."""
        trajectories = list(trajectories)
        config = config or TrainSFTConfig()
        if not trajectories:
            raise AutoRLError(f"train_sft of {model.name!r}: no trajectories to train on")
        config.rates(len(trajectories))  # a schedule that does not fit the batches: one line, before anything runs
        with activity("training"):
            metrics = dict(await self.sft_step(model, trajectories, config))
        return self._result(model, metrics, verbose, "fine-tuned (SFT)")

    def _result(self, model: TrainableModel, metrics: dict[str, Any], verbose: bool, what: str) -> TrainResult:
        step = int(metrics.pop("step"))
        if verbose:
            log.info("model %r %s step %d: %s", model.name, what, step, metrics)
        return TrainResult(step=step, metrics=metrics, checkpoint_path=self.checkpoint_path(model, step))

    def checkpoint_path(self, model: TrainableModel, step: int) -> str | None:
        """Checkpoint `step`'s directory on this machine, if it is here."""
        path = self.run_dir(model) / "checkpoints" / checkpoint_name(step)
        return str(path) if path.is_dir() else None

    def run_dir(self, model: Model) -> Path:
        """The model's run directory on this machine (each backend says where)."""
        raise NotImplementedError

    async def train_step(self, model: TrainableModel, groups: list[TrajectoryGroup], config: TrainConfig) -> dict:
        """One GRPO step; returns its metrics, with `step` (each backend runs it)."""
        raise NotImplementedError

    async def sft_step(self, model: TrainableModel, trajectories: list[Trajectory], config: TrainSFTConfig) -> dict:
        """One supervised step; returns its metrics, with `step` (each backend runs it)."""
        raise NotImplementedError
