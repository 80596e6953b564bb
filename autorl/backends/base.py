"""The `Backend` interface that `TrainableModel` is typed against, and `ModelBackend`, the one implementation
of its training loop that every backend running its own servers and trainer shares.

A backend registers models (starts serving them), trains them one GRPO step at a time, records evaluation
batches (`log`), deletes checkpoints by a policy, serves any of their checkpoints, and gives their OpenAI
clients the transport that reaches its servers. Its methods take and return plain data (models, groups,
names, numbers), so a backend in another process answers them the same. `ModelBackend` does what is the
same wherever the work runs: the run directory, one step at a time per model, inference held back while a
step runs (the model's `InferenceGate`), the histories, the checkpoints kept, serving the new checkpoint,
W&B (`Model.report_metrics`). Where the
servers and the trainer run is its `Placement`'s: this machine (`autorl.backends.local`) or a Ray cluster
(`autorl.backends.cluster`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import statistics
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from ..atomic import atomic_text
from ..config import TrainConfig
from ..errors import AutoRLError
from ..serving.vllm_server import install_exit_hooks
from ..tracking import Tracker
from ..training.checkpoints import checkpoint_name, complete_checkpoints, latest_checkpoint, remove_checkpoint
from ..trajectories import Trajectory, TrajectoryGroup
from ..types import TrainResult, TrainSFTConfig
from .retention import KeepPolicy, best_checkpoint
from .run_dir import (
    HISTORY_FILE,
    LOG_HISTORY_FILE,
    append_history,
    ensure_writable,
    read_history,
    reconcile_history,
    save_trajectories,
    warn_untrained,
)
from .transport import GatedTransport, InferenceGate

if TYPE_CHECKING:
    from ..model import Model, TrainableModel
    from ..serving.config import ServerConfig

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
        """
        from ..dev import train_keywords

        resolved, verbose, save_checkpoint = train_keywords(config, keywords)
        if not save_checkpoint:
            log.warning("backend.train(save_checkpoint=False): autorl's step is its checkpoint; it is written")
        metrics = dict(await self.train_step(model, list(trajectory_groups), resolved))
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


@dataclass(eq=False)
class ModelSlot:
    """What a `ModelBackend` holds for one registered model."""

    run_dir: Path
    serving: Serving
    trainer: Trainer | None = None
    """Made at the first training step."""
    gate: InferenceGate = field(default_factory=InferenceGate)
    """Closed while a step runs: the model's requests wait."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One training step at a time (and no checkpoint deleted during one)."""


class ModelBackend(TrainingCalls):
    """A `Backend` that serves and trains its models itself, on its `placement`.

    path: the home of all runs; a model's run directory is `path/<project>/<name>/` and holds
        `checkpoints/NNNN/` (PEFT LoRA), `history.jsonl` and `logs/`.
    """

    server_config: ServerConfig
    """How its models' servers start and serve their LoRAs (a subclass sets it)."""

    def __init__(self, path: str | os.PathLike, placement: Placement):
        install_exit_hooks()  # here, in the thread that makes the backend: SIGTERM is the main thread's to take
        self.path = Path(path)
        self.placement = placement
        self._slots: dict[str, ModelSlot] = {}
        self._trackers: dict[Path, Tracker] = {}

    @property
    def remote_server_starts(self) -> int:
        return self.placement.remote_server_starts

    def check_can_start(self, model: TrainableModel) -> None:
        return None

    def serves_adapters(self) -> bool:
        return not self.server_config.serves_merged()

    def starts_embedded_apart(self) -> bool:
        return False  # a cluster has replicas of the embedded model of its own

    def shares_cpu_with_embedded(self) -> bool:
        return False

    def run_dir(self, model: Model) -> Path:
        return self.path / model.project / model.name

    async def register(self, model: TrainableModel) -> None:
        """Start the model's inference, serving its newest checkpoint if it has one. A model of a name already
        registered gets that one's endpoint: its server, history and checkpoints."""
        run_dir = self.run_dir(model)
        if model.name in self._slots:
            serving = self._slots[model.name].serving
        else:
            ensure_writable(run_dir)
            serving = await self.placement.start_serving(model, run_dir)
            self._slots[model.name] = ModelSlot(run_dir, serving)
            reconcile_history(run_dir)
        model.inference_base_url = serving.base_url
        model.inference_api_key = serving.api_key
        latest = latest_checkpoint(run_dir / "checkpoints")
        model.inference_model_name = await serving.serve(latest[0] if latest else 0)

    async def get_step(self, model: TrainableModel) -> int:
        latest = latest_checkpoint(self.run_dir(model) / "checkpoints")
        return latest[0] if latest else 0

    async def train_step(self, model: TrainableModel, groups: list[TrajectoryGroup], config: TrainConfig) -> dict:
        """One GRPO step: holds back the model's inference, updates the LoRA, checkpoints it, serves it."""

        async def update(trainer: Trainer, step: int) -> dict:
            metrics = await trainer.step(groups, config, step)
            warn_untrained(step, groups, metrics)
            return metrics

        return await self._advance(model, update)

    async def sft_step(self, model: TrainableModel, trajectories: list[Trajectory], config: TrainSFTConfig) -> dict:
        """One supervised step, as a GRPO step: the next checkpoint, recorded and served as any other."""
        return await self._advance(model, lambda trainer, step: trainer.sft(trajectories, config, step))

    async def _advance(self, model: TrainableModel, update: Callable[[Trainer, int], Awaitable[dict]]) -> dict:
        """The model's next step by `update` (its trainer, the step): inference held back meanwhile; its history
        line and W&B record; its checkpoint served. Returns its metrics, with `step`."""
        slot = self.slot(model)
        async with slot.lock, slot.gate.closed():
            if slot.trainer is None:
                slot.trainer = self.placement.trainer(model, slot.run_dir)
            step = await self.get_step(model) + 1
            metrics = await update(slot.trainer, step)
            append_history(slot.run_dir, {"step": step, **metrics})
            self._tracker(model).log(metrics, step, "train")
            # the step before stays servable: rollouts that named it may send after this step (`Serving.retire`)
            model.inference_model_name = await slot.serving.serve(step)
        return {"step": step, **metrics}

    async def serve_checkpoint(self, model: TrainableModel, step: int) -> str:
        """The name under which checkpoint `step` (0: the base model) is served, loading it if needed.

        With merged serving the server holds one checkpoint at a time: serving another step swaps the
        weights for every request after the swap (requests in flight finish on the old ones), so answer
        with one checkpoint after the other.
        """
        return await self.slot(model).serving.serve(step)

    async def log(
        self, model: Model, groups: list[TrajectoryGroup], split: str, metrics: dict[str, float], step: int | None
    ) -> dict[str, float]:
        """Record an evaluation batch: a line of `log_history.jsonl` (metrics as `<split>/<name>`), the
        trajectories in `trajectories/<split>/NNNN.parquet`, and W&B when the model reports there. Without
        groups, `metrics` alone (a training step's, as ART's backend-first programs log them)."""
        from ..model import TrainableModel

        if step is None:
            step = await self.get_step(model) if isinstance(model, TrainableModel) else 0
        run_dir = self.run_dir(model)
        ensure_writable(run_dir)
        recorded = {**batch_metrics(groups), **metrics} if groups else dict(metrics)  # metrics alone: as given
        if groups:
            save_trajectories(run_dir / "trajectories" / split / f"{checkpoint_name(step)}.parquet", groups, step)
        record = {f"{split}/{name}": value for name, value in recorded.items() if value == value}  # NaN: no value
        stamp = datetime.now().isoformat(timespec="seconds")
        append_history(run_dir, {"step": step, "split": split, **record, "recorded_at": stamp}, LOG_HISTORY_FILE)
        self._tracker(model).log(recorded, step, split)
        return recorded

    async def delete_checkpoints(self, model: TrainableModel, best_checkpoint_metric: str, keep: str) -> list[int]:
        """Delete the checkpoints that `keep` leaves out (`KeepPolicy`), between training steps."""
        try:
            policy = KeepPolicy.parse(keep)
        except ValueError as exc:
            raise AutoRLError(f"delete_checkpoints(keep={keep!r}): {exc}") from None
        slot = self.slot(model)
        if policy.everything:
            return []
        checkpoints = slot.run_dir / "checkpoints"
        async with slot.lock:
            steps = [step for step, _ in complete_checkpoints(checkpoints)]
            best = None
            if policy.best:
                logged = read_history(slot.run_dir, LOG_HISTORY_FILE)
                best = best_checkpoint(logged, read_history(slot.run_dir), best_checkpoint_metric, steps)
            kept = policy.steps_to_keep(steps, best) | slot.serving.served_steps()
            doomed = [step for step in steps if step not in kept]
            for step in doomed:
                await slot.serving.retire(step)
                remove_checkpoint(checkpoints, step)
        return doomed

    async def rollback(self, model: TrainableModel, step: int) -> list[dict]:
        """Make checkpoint `step` (0: the base model) the newest again, between training steps: it is served, the
        later checkpoints and their history records are deleted, and the next step's trainer starts from it (its
        LoRA and optimizer state; a fresh LoRA from 0). Returns the history records deleted."""
        slot = self.slot(model)
        async with slot.lock, slot.gate.closed():
            if slot.trainer is not None:
                slot.trainer.close()
                slot.trainer = None
            model.inference_model_name = await slot.serving.serve(step)
            checkpoints = slot.run_dir / "checkpoints"
            for later, _ in complete_checkpoints(checkpoints):
                if later > step:
                    await slot.serving.retire(later)
                    remove_checkpoint(checkpoints, later)
            records = read_history(slot.run_dir)
            kept = [r for r in records if r.get("step", 0) <= step]
            atomic_text(slot.run_dir / HISTORY_FILE, "".join(json.dumps(r) + "\n" for r in kept))
        return [r for r in records if r.get("step", 0) > step]

    def _tracker(self, model: Model) -> Tracker:
        """The model's W&B run (`Model.report_metrics`), in its run directory, under a stable id."""
        run_dir = self.run_dir(model)
        if run_dir not in self._trackers:
            wanted = model.report_metrics
            report_to = ("WANDB_API_KEY" in os.environ) if wanted is None else wanted
            run_id = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]
            self._trackers[run_dir] = Tracker(report_to, run_dir, model.name, run_id, project=model.project)
        return self._trackers[run_dir]

    async def recover(self, model: TrainableModel) -> bool:
        slot = self._slots.get(model.name)
        return slot is not None and await slot.serving.recover()

    def transport(self, model: TrainableModel) -> httpx.AsyncBaseTransport:
        slot = self.slot(model)
        return GatedTransport(slot.gate, slot.serving.recover, slot.serving.transport())

    def slot(self, model: TrainableModel) -> ModelSlot:
        """What the backend holds for `model`; one clear error if it is not registered."""
        if model.name not in self._slots:
            raise AutoRLError(f"model {model.name!r} is not registered; call `await model.register(backend)` first")
        return self._slots[model.name]

    def serving(self, model: TrainableModel) -> Serving:
        """The model's inference (its server, or its replicas)."""
        return self.slot(model).serving

    def close(self) -> None:
        """Stop every server and trainer this backend started."""
        try:
            self.placement.close()  # first: it cancels a start under way (the embedded model's on a cluster)
        finally:
            slots, self._slots = list(self._slots.values()), {}
            trackers, self._trackers = list(self._trackers.values()), {}
            for slot in slots:
                slot.serving.close()
                if slot.trainer is not None:
                    slot.trainer.close()
            for tracker in trackers:
                tracker.finish()

    async def __aenter__(self) -> ModelBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def batch_metrics(groups: list[TrajectoryGroup]) -> dict[str, float]:
    """What `Model.log` records of a batch, as ART does: `reward` (mean over trajectories), `reward_std_dev`
    (the mean of each group's reward standard deviation), `exception_rate` (rollouts that raised, of all)
    and the mean of each metric the trajectories carry."""
    trajectories = [t for g in groups for t in g.trajectories]
    failed = sum(len(g.exceptions) for g in groups)
    values: dict[str, list[float]] = {"reward": [t.reward for t in trajectories]}
    for trajectory in trajectories:
        for name, value in trajectory.metrics.items():
            values.setdefault(name, []).append(float(value))
    metrics = {name: statistics.fmean(v) for name, v in values.items() if v}
    spreads = [statistics.pstdev(t.reward for t in g.trajectories) for g in groups if len(g.trajectories) > 1]
    metrics["reward_std_dev"] = statistics.fmean(spreads) if spreads else 0.0
    if trajectories or failed:
        metrics["exception_rate"] = failed / (len(trajectories) + failed)
    return metrics
