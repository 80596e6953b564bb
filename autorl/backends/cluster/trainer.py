"""A cluster model's trainer (`ClusterTrainer`): its `TrainerActor`s, one or the ranks of a data-parallel
trainer, started from the newest checkpoint, each step's checkpoint written under the run directory, and a
step redone on new workers when one died. Apart from `backend` (the placement and the replicas) as the
training half of a cluster run."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...atomic import atomic_dir
from ...config import TrainConfig
from ...errors import AutoRLError
from ...training.checkpoints import checkpoint_name, latest_checkpoint
from ...trajectories import Trajectory, TrajectoryGroup
from ...types import TrainSFTConfig
from .actors import TrainerActor, read_files, write_files
from .ray_cluster import stop_actors

if TYPE_CHECKING:
    from ...model import TrainableModel
    from .backend import ClusterPlacement

log = logging.getLogger("autorl")

TRAINER_RESTARTS = 2
"""How many times a step is redone on new trainer workers after one died (`ClusterTrainer`)."""
PLACEMENT_TIMEOUT_S = 120.0
"""How long a data-parallel trainer's workers may wait for the cluster to place them all."""
DEATH_WAIT_S = 10.0
"""How long a failed step waits for the other workers' answers: a worker's death is reported to the driver
within seconds, and it is the cause to act on, not the error it caused on a rank waiting for it."""


class ClusterTrainer:
    """The trainer of one model: `ClusterConfig.trainer_workers` `TrainerActor`s started from the newest
    checkpoint (one: a single actor; more: the ranks of a data-parallel trainer, in a placement group so that
    all start or none, joined into one torch process group, `autorl.training.data_parallel`). Each step's
    checkpoint files come back from rank 0 and are written under the run directory here.

    A worker that dies (its process killed, its node lost) fails the step on every rank: the workers are
    ended, a new set starts from the newest checkpoint under the run directory (the one before the step, as
    the step's own is written only once every rank has finished it) and the step is redone with the same
    groups, up to `TRAINER_RESTARTS` times: no group is lost or trained twice."""

    def __init__(self, model: TrainableModel, run_dir: Path, placement: ClusterPlacement):
        self.run_dir = run_dir
        self.base_model = model.base_model
        self.trainer_config = model.trainer
        self.max_seq_length = placement.server_config.with_overrides(model.server).max_model_len
        self.cluster = placement.cluster
        self._resources = placement.resources(self.cluster.trainer_cpus)
        self.restarts = 0
        """How many times the workers were started again after one died."""
        self.actors: list[Any] = []
        self._group: Any = None
        """The placement group of a data-parallel trainer's workers."""
        self._joined = False

    def _start(self) -> None:
        """Start the workers from the newest checkpoint (a data-parallel trainer's join their process group
        next, `_join`)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        latest = latest_checkpoint(self.run_dir / "checkpoints")
        done, files = (latest[0], read_files(latest[1])) if latest else (0, None)
        workers = self.cluster.trainer_workers
        options = {"max_restarts": 0, **self._resources}
        if workers > 1:
            bundle = {"GPU": 1} if "num_gpus" in self._resources else {"CPU": self.cluster.trainer_cpus}
            self._group = ray.util.placement_group([bundle] * workers, strategy="PACK")
        files_ref = ray.put(files)  # once into the object store, whatever the number of workers
        for rank in range(workers):
            if self._group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(self._group, rank)
            actor = ray.remote(TrainerActor).options(**options)
            cpus = self.cluster.trainer_cpus
            self.actors.append(
                actor.remote(
                    self.base_model, self.trainer_config, cpus, files_ref, done, rank, workers, self.max_seq_length
                )
            )
        self._joined = workers == 1

    async def _join(self) -> None:
        """Once the placement group is placed, every worker joins the process group at rank 0's address."""
        if self._joined:
            return
        try:
            await asyncio.wait_for(self._group.ready(), PLACEMENT_TIMEOUT_S)
        except TimeoutError:
            raise AutoRLError(
                f"the Ray cluster did not place the {len(self.actors)} trainer workers (--trainer-workers) in "
                f"{PLACEMENT_TIMEOUT_S:.0f} s: its {'GPUs' if 'num_gpus' in self._resources else 'CPUs'} are "
                "held by other actors; ask for fewer or free them"
            ) from None
        address = await self.actors[0].address.remote()
        await asyncio.gather(*(actor.join.remote(address, len(self.actors)) for actor in self.actors))
        self._joined = True

    async def step(self, groups: list[TrajectoryGroup], config: TrainConfig, step: int) -> dict:
        return self._written(await self._on_every_worker("step", groups, config, step), step)

    async def sft(self, trajectories: list[Trajectory], config: TrainSFTConfig, step: int) -> dict:
        return self._written(await self._on_every_worker("sft", trajectories, config, step), step)

    async def _on_every_worker(self, method: str, *args: Any) -> tuple[dict, dict[str, bytes]]:
        """Rank 0's answer to `method(*args)` run on every worker, redone on new workers when one died. After
        any failure the workers are replaced (the next call starts new ones from the newest checkpoint): a
        failed step may have left them apart, one waiting in a collective or holding a part-made update."""
        deaths = _worker_deaths()
        for attempt in range(TRAINER_RESTARTS + 1):
            if not self.actors:
                self._start()
            try:
                await self._join()
                calls = [asyncio.ensure_future(getattr(actor, method).remote(*args)) for actor in self.actors]
                return (await _all_or_death(calls))[0]
            except deaths as death:
                self._stop()
                if getattr(death, "actor_init_failed", False):  # not a death: the trainer cannot start (it says why)
                    raise
                if attempt == TRAINER_RESTARTS:
                    raise AutoRLError(
                        f"a trainer worker died {attempt + 1} times in step {args[-1]}, the last time: {death}"
                    ) from None
                log.warning("a trainer worker died (%s); step %d is redone from the newest checkpoint", death, args[-1])
                self.restarts += 1
            except BaseException:
                self._stop()
                raise
        raise AssertionError("unreachable")

    def _written(self, answer: tuple[dict, dict[str, bytes]], step: int) -> dict:
        """The step's metrics, once the checkpoint files the actor sent are written under the run directory."""
        metrics, files = answer
        with atomic_dir(self.run_dir / "checkpoints" / checkpoint_name(step)) as tmp:
            write_files(files, tmp)
        return metrics

    def _stop(self) -> None:
        import ray

        if self.actors:
            stop_actors(self.actors)
            self.actors = []
        if self._group is not None:
            ray.util.remove_placement_group(self._group)
            self._group = None

    def close(self) -> None:
        self._stop()


def _worker_deaths() -> tuple[type[BaseException], ...]:
    """How Ray reports a trainer worker's end: its actor died (`RayActorError`, `ActorUnavailableError` too), or
    Ray's memory monitor killed its task (`OutOfMemoryError`: the actor's process is gone with it)."""
    import ray

    return ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError


async def _all_or_death(calls: list[asyncio.Future]) -> list[Any]:
    """Every call's result. On a failure, a worker's death (`_worker_deaths`) is raised rather than what it
    caused on the others (a rank waiting for it in a collective fails, or waits on), if one is reported within
    `DEATH_WAIT_S`; else the first failure."""
    try:
        _, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_EXCEPTION)
        if pending:  # one failed: the others' answers, or their deaths, for a moment
            await asyncio.wait(pending, timeout=DEATH_WAIT_S)
        failures = [c.exception() for c in calls if c.done() and c.exception() is not None]
        if failures:
            raise next((f for f in failures if isinstance(f, _worker_deaths())), failures[0])
        return [c.result() for c in calls]
    finally:
        for call in calls:
            call.cancel()
