"""`ModelBackend`, the one implementation of the training loop that every backend running its own servers
and trainer shares (`LocalBackend` on this machine, `ClusterBackend` on Ray), apart from the interfaces in
`base` so those read on their own.

`ModelBackend` does what is the same wherever the work runs: the run directory, one step at a time per
model, inference held back while a step runs (the model's `InferenceGate`), the histories, the checkpoints
kept, serving the new checkpoint, W&B (`Model.report_metrics`). Where the servers and the trainer run is its
`Placement`'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import httpx

from ..agents.call_reading import summed_counts
from ..atomic import atomic_file
from ..config import TrainConfig
from ..errors import AutoRLError
from ..serving.lifetime import install_exit_hooks
from ..tracking import Tracker
from ..training.checkpoints import checkpoint_name, complete_checkpoints, latest_checkpoint, remove_checkpoint
from ..trajectories import Trajectory, TrajectoryGroup
from ..types import TrainSFTConfig
from ..utils.output_dirs import get_output_dir_from_model_properties
from ..utils.trajectory_logging import write_trajectory_groups_parquet
from . import art_layout
from .base import Placement, Serving, Trainer, TrainingCalls
from .retention import KeepPolicy, best_checkpoint
from .run_dir import (
    HISTORY_FILE,
    LOG_HISTORY_FILE,
    append_history,
    ensure_writable,
    read_history,
    reconcile_history,
    warn_untrained,
    write_history,
)
from .transport import GatedTransport, InferenceGate

if TYPE_CHECKING:
    from ..model import Model, TrainableModel
    from ..serving.config import ServerConfig


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

    path: the home of all runs; a model's run directory holds `checkpoints/NNNN/` (PEFT LoRA), `history.jsonl`,
        `log_history.jsonl`, `trajectories/` and `logs/`.
    layout: where a model's run directory is under `path`. "art" (the default: where ART's code looks for a model
        trained through its API): `path/<project>/models/<name>/` (`autorl.utils.output_dirs`), with checkpoint
        `0000` (the base model) written at registration, and a step whose groups all tie (the LoRA unchanged)
        taking the place of the checkpoint before it, as ART renames it. "run" (`autorl run`'s layout):
        `path/<project>/<name>/`, every step's checkpoint kept.
    """

    server_config: ServerConfig
    """How its models' servers start and serve their LoRAs (a subclass sets it)."""

    def __init__(self, path: str | os.PathLike, placement: Placement, layout: Literal["art", "run"] = "art"):
        install_exit_hooks()  # here, in the thread that makes the backend: SIGTERM is the main thread's to take
        if layout not in ("art", "run"):
            raise AutoRLError(
                f"layout {layout!r}: 'art' (<path>/<project>/models/<name>) or 'run' (<path>/<project>/<name>)"
            )
        self.path = Path(path)
        self.layout = layout
        self.placement = placement
        self._slots: dict[str, ModelSlot] = {}
        self._trackers: dict[Path, Tracker] = {}

    @property
    def remote_server_starts(self) -> int:
        return self.placement.remote_server_starts

    def check_can_start(self, model: TrainableModel) -> None:
        """What would fail a model's server or trainer, checked before either starts: the CUDA build installed
        can run here (`autorl.serving.gpu.check_this_cuda_build`), the LoRA can be served (`check_lora_servable`)."""
        from ..serving.config import check_lora_servable
        from ..serving.gpu import check_this_cuda_build

        check_this_cuda_build()
        config = self.server_config.with_overrides(model.server)
        check_lora_servable(config, model.trainer.lora_rank, model.trainer.target_modules)

    def serves_adapters(self) -> bool:
        return not self.server_config.serves_merged()

    def starts_embedded_apart(self) -> bool:
        return False  # a cluster has replicas of the embedded model of its own

    def shares_cpu_with_embedded(self) -> bool:
        return False

    def run_dir(self, model: Model) -> Path:
        if self.layout == "run":
            return self.path / model.project / model.name
        return Path(get_output_dir_from_model_properties(model.project, model.name, str(self.path)))

    async def register(self, model: TrainableModel) -> None:
        """Start the model's inference, serving its newest checkpoint if it has one. A model of a name already
        registered gets that one's endpoint: its server, history and checkpoints."""
        run_dir = self.run_dir(model)
        if model.name in self._slots:
            serving = self._slots[model.name].serving
        else:
            if self.layout == "art":
                art_layout.migrate(self.path / model.project / model.name, run_dir)
            ensure_writable(run_dir)
            if self.layout == "art":
                art_layout.write_base_checkpoint(run_dir, model.base_model)
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
        """One GRPO step: holds back the model's inference, updates the LoRA, checkpoints it, serves it. Its
        metrics (the history's line) are the trainer's and, for rollouts with tools, the step's tool calls by
        how they were read (`call_reading.summed_counts`)."""

        async def update(trainer: Trainer, step: int) -> dict:
            calls = summed_counts(t.metrics for g in groups for t in g.trajectories)
            metrics = {**await trainer.step(groups, config, step), **calls}
            warn_untrained(step, groups, metrics)
            return metrics

        metrics = await self._advance(model, update)
        if self.layout == "art" and metrics.get("groups_trained") == 0 and not config.kl_beta:
            await self._replace_unchanged(model, metrics["step"])
        return metrics

    async def _replace_unchanged(self, model: TrainableModel, step: int) -> None:
        """ART's layout after a step whose groups all tied (its LoRA that of step - 1): checkpoint `step` takes the
        place of the one before it, which goes (ART renames it), so the steps of a run without signal leave one
        checkpoint, not one each."""
        slot = self.slot(model)
        async with slot.lock:
            before = slot.run_dir / "checkpoints" / checkpoint_name(step - 1)
            if before.is_dir() and step - 1 not in slot.serving.served_steps():
                await slot.serving.retire(step - 1)
                remove_checkpoint(slot.run_dir / "checkpoints", step - 1)

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
        trajectories in `trajectories/<split>/NNNN.parquet` (ART's format: `autorl.utils.trajectory_logging`), and
        W&B when the model reports there. Without
        groups, `metrics` alone (a training step's, as ART's backend-first programs log them)."""
        from ..model import TrainableModel

        if step is None:
            step = await self.get_step(model) if isinstance(model, TrainableModel) else 0
        run_dir = self.run_dir(model)
        ensure_writable(run_dir)
        recorded = {**batch_metrics(groups), **metrics} if groups else dict(metrics)  # metrics alone: as given
        if groups:
            path = run_dir / "trajectories" / split / f"{checkpoint_name(step)}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_file(path, lambda tmp: write_trajectory_groups_parquet(groups, tmp))
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
        later checkpoints and their history and `model.log` records are deleted, and the next step's trainer
        starts from it (its LoRA and optimizer state; a fresh LoRA from 0). Returns the history records deleted."""
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
            dropped = _truncated(slot.run_dir, HISTORY_FILE, step)
            _truncated(slot.run_dir, LOG_HISTORY_FILE, step)  # what `model.log` logged of a later step was its too
        return dropped

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


def _truncated(run_dir: Path, name: str, step: int) -> list[dict]:
    """Rewrite history file `name` without the records of steps after `step`; the records removed."""
    records = read_history(run_dir, name)
    write_history(run_dir, [r for r in records if r.get("step", 0) <= step], name)
    return [r for r in records if r.get("step", 0) > step]
