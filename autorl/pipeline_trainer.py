"""ART's `PipelineTrainer`: rollouts, training and evaluation as asynchronous stages with bounded staleness.

The rollout stage (`num_rollout_workers` asyncio tasks) keeps answering scenarios with the newest weights the
backend serves and puts each finished group on an `asyncio.Queue`; the training stage takes groups off it as
they come, drops those sampled more than `max_steps_off_policy` policy versions ago (stale) and those whose
rewards tie (no signal), counting both (and groups without a trajectory: every rollout raised), and runs one `backend.train` step per batch of `min_batch_size` to
`max_batch_size` groups; every `eval_every_n_steps` steps the evaluation stage runs `eval_fn` on the new
checkpoint while the rollouts go on (the next update waits for it, so it evaluates exactly that checkpoint).

Each trajectory records the policy versions (steps) that produced it (`Trajectory.initial_policy_version`,
`final_policy_version`): every token it holds was sampled by a version between the two. A rollout worker
does not start a scenario while the policy it would sample is already more than `max_steps_off_policy`
versions behind the step being trained, nor while `max_batch_size` x max(1, `max_steps_off_policy`) groups
that can still be trained in time are in flight or waiting (`claim_limit`): the steps after the one in
progress could not train more before they are too old, so only stragglers are sampled only to be dropped.
With `max_steps_off_policy` > 0 the loss corrects for stale tokens by truncated importance sampling
(`TrainConfig.importance_sampling_correction`), unless the given `TrainConfig` says otherwise.

With tracing on (`autorl.tracing`) each step is an `autorl.step` span (the step, its mean reward) from the moment
its batch is in to the end of `after_step`, with the update's `autorl.update` span under it (`backend.train`'s);
the rollouts run ahead of the step that trains them, so their spans sit under the span current at `train()`.

`resume` continues from the model's newest step: the counts, the staleness histogram and how many scenarios
were taken are kept in the run directory (`STATE_FILE`), so a resumed run skips the scenarios it took before
(groups in flight when it stopped are not trained) and counts on. What it dropped, and how stale what it
trained was, goes into every step's metrics (`PipelineTrainer.step_metrics`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import tracing
from .atomic import atomic_text
from .config import TrainConfig
from .errors import AutoRLError
from .pipeline_config import PipelineAutotuneConfig, PipelineRuntimeConfig, runtime_settings
from .pipeline_gate import PolicyGate
from .pipeline_state import STATE_FILE, PipelineState
from .trajectories import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from .backends.base import Backend
    from .model import TrainableModel

log = logging.getLogger("autorl")

ScenarioT = TypeVar("ScenarioT")
ConfigT = TypeVar("ConfigT")
RolloutFn = Callable[["TrainableModel", ScenarioT, ConfigT], Awaitable[TrajectoryGroup]]
"""ART's rollout function: one scenario answered as a scored group, `await rollout_fn(model, scenario, config)`."""
SingleRolloutFn = Callable[["TrainableModel", ScenarioT, ConfigT], Awaitable[Trajectory]]
"""One scored rollout of a scenario (`make_group_rollout_fn` makes a `RolloutFn` of it)."""
EvalResult = Sequence[Trajectory | TrajectoryGroup] | Mapping[str, Sequence[Trajectory | TrajectoryGroup]]
EvalFn = Callable[["TrainableModel", int, ConfigT], Awaitable[EvalResult]]
"""ART's evaluation function, `await eval_fn(model, step, config)`: trajectories or groups (logged as split
"val"), or a mapping of split names to them."""


def make_group_rollout_fn(single_rollout_fn: SingleRolloutFn[ScenarioT, ConfigT], n: int = 4) -> RolloutFn:
    """A `RolloutFn` that runs `single_rollout_fn` `n` times at once on a scenario and groups the trajectories (a
    rollout that raised becomes one of the group's `exceptions`), as ART's."""

    async def group_rollout(model: TrainableModel, scenario: ScenarioT, config: ConfigT) -> TrajectoryGroup:
        return await TrajectoryGroup(single_rollout_fn(model, scenario, config) for _ in range(n))

    return group_rollout


async def _scenario_iterator(scenarios: AsyncIterator[ScenarioT] | Iterable[ScenarioT]) -> AsyncIterator[ScenarioT]:
    if isinstance(scenarios, AsyncIterator):
        async for scenario in scenarios:
            yield scenario
    else:
        for scenario in scenarios:
            yield scenario


class PipelineTrainer(Generic[ScenarioT, ConfigT]):
    """Rollouts, training and evaluation as three asynchronous stages (ART's `PipelineTrainer`; the module's
    docstring says how they meet). `await trainer.train()` runs them until `max_steps` steps are trained or the
    scenarios run out."""

    def __init__(
        self,
        model: TrainableModel,
        backend: Backend,
        rollout_fn: RolloutFn,
        scenarios: AsyncIterator[ScenarioT] | Iterable[ScenarioT],
        config: ConfigT,
        eval_fn: EvalFn | None = None,
        *,
        num_rollout_workers: int = 4,
        min_batch_size: int = 4,
        max_batch_size: int | None = None,
        max_steps_off_policy: int = 4,
        queue_maxsize: int | None = None,
        pipeline: PipelineRuntimeConfig | None = None,
        autotune: PipelineAutotuneConfig | None = None,
        learning_rate: float | None = None,
        loss_fn: str | None = None,
        loss_fn_config: dict[str, Any] | None = None,
        normalize_advantages: bool | None = None,
        kl_penalty_coef: float | None = None,
        max_steps: int | None = None,
        discard_queue_multiplier: int = 100,
        eval_every_n_steps: int = 20,
        eval_at_start: bool = True,
        save_checkpoint: bool = True,
        resume: bool = True,
        train_config: TrainConfig | None = None,
        after_step: Callable[[int, list[TrajectoryGroup], dict[str, float]], Awaitable[None]] | None = None,
    ) -> None:
        """
        model, backend: a `TrainableModel` registered on `backend`.
        rollout_fn: `await rollout_fn(model, scenario, config)` -> a scored `TrajectoryGroup` (`make_group_rollout_fn`
            makes one from a single rollout).
        scenarios: what the rollouts answer, an iterable or async iterator (`itertools.cycle` for epochs without end).
        config: passed to `rollout_fn` and `eval_fn` as is.
        eval_fn: `await eval_fn(model, step, config)` -> trajectories or groups (logged as split "val"), or a
            mapping of split names to them; run on checkpoint `step` every `eval_every_n_steps` steps.
        num_rollout_workers: scenarios answered at once, at most (no more than `claim_limit` can be in flight).
        min_batch_size, max_batch_size: groups per training step: it starts once `min_batch_size` are in and takes
            those waiting up to `max_batch_size` (default: `min_batch_size`).
        max_steps_off_policy: how many policy versions older than the one being trained a group may be (0: only
            the current one's); older groups are dropped and counted (`discarded/*/stale_groups`).
        queue_maxsize: finished groups waiting to be trained, at most (default: max_batch_size x
            max(1, max_steps_off_policy)); a full queue holds the rollout workers back.
        pipeline: ART's 2026 object of the five sizes above; given, it replaces them. autotune: ART's autotuner
            settings; only mode "off" (autorl has no autotuner).
        learning_rate, loss_fn ("cispo", ART's default, or "ppo"), loss_fn_config (`TrainConfig` fields),
            normalize_advantages, kl_penalty_coef: each step's settings as `backend.train` takes them, over
            `train_config` (autorl's `TrainConfig`: every other setting, such as the importance sampling cap).
        max_steps: training steps to run from the model's current step (None: until the scenarios run out).
        discard_queue_multiplier: stop (with a warning) when this many x min_batch_size groups in a row tied or
            failed (no trajectory: each rollout raised): the policy has collapsed, or the judge cannot tell answers
            apart.
        eval_every_n_steps: evaluate every this many steps (0: never); eval_at_start: evaluate the starting
            checkpoint first (once: a resumed run does not evaluate it again).
        save_checkpoint: accepted for ART's sake: autorl's step is its checkpoint, always written.
        resume: continue the counts and the scenario offset of an earlier run of this model (`STATE_FILE`).
        train_config: autorl's `TrainConfig` of every step (the keywords above go over it).
        after_step: autorl's: `await after_step(step, groups, metrics)` after each step is logged (the pipeline's
            own per-step work: saving, printing, the sentinel); it may call `request_stop()`.
        """
        from .dev import train_keywords

        sizes = (num_rollout_workers, min_batch_size, max_batch_size, max_steps_off_policy, queue_maxsize)
        num_rollout_workers, min_batch_size, max_batch_size, max_steps_off_policy, queue_maxsize = runtime_settings(
            pipeline, autotune, sizes
        )
        if num_rollout_workers < 1 or min_batch_size < 1 or max_steps_off_policy < 0 or eval_every_n_steps < 0:
            raise AutoRLError(
                "PipelineTrainer: num_rollout_workers and min_batch_size must be >= 1, max_steps_off_policy and "
                "eval_every_n_steps >= 0"
            )
        max_batch_size = min_batch_size if max_batch_size is None else max_batch_size
        if max_batch_size < min_batch_size:
            raise AutoRLError(f"PipelineTrainer: max_batch_size {max_batch_size} < min_batch_size {min_batch_size}")
        if max_steps is not None and max_steps < 0:
            raise AutoRLError("PipelineTrainer: max_steps must be >= 0")
        self.model, self.backend, self.rollout_fn, self.config, self.eval_fn = (
            model,
            backend,
            rollout_fn,
            config,
            eval_fn,
        )
        self.scenarios = scenarios
        self.num_rollout_workers, self.min_batch_size, self.max_batch_size = (
            num_rollout_workers, min_batch_size, max_batch_size,
        )  # fmt: skip
        self.max_steps_off_policy, self.max_steps = max_steps_off_policy, max_steps
        self.claim_limit = max_batch_size * max(1, max_steps_off_policy)
        """Groups in flight or waiting, at most: what the next max(1, max_steps_off_policy) steps can train in time."""
        self.queue_maxsize = queue_maxsize or self.claim_limit
        self.discard_limit = discard_queue_multiplier * min_batch_size
        self.eval_every_n_steps, self.eval_at_start, self.resume = eval_every_n_steps, eval_at_start, resume
        self.after_step = after_step
        keywords = {
            "learning_rate": learning_rate,
            "loss_fn": loss_fn if loss_fn is not None or train_config is not None else "cispo",
            "normalize_advantages": normalize_advantages,
            "kl_penalty_coef": kl_penalty_coef,
        }
        keywords = {**{k: v for k, v in keywords.items() if v is not None}, **(loss_fn_config or {})}
        self.train_config, _, _ = train_keywords(train_config, keywords)
        if max_steps_off_policy > 0 and "importance_sampling_correction" not in self.train_config.model_fields_set:
            self.train_config = self.train_config.model_copy(update={"importance_sampling_correction": True})
        self.state = PipelineState()
        self._gate = PolicyGate(max_steps_off_policy, self.claim_limit, 0)
        self._done = False
        self._useless_in_a_row = 0  # tied or failed groups since the last usable one
        self._queue: asyncio.Queue[tuple[int, TrajectoryGroup] | None] | None = None  # (claimed version, group)

    @property
    def policy_version(self) -> int:
        """The newest trained step: what the rollouts sample from."""
        return self._gate.version

    def request_stop(self) -> None:
        """End the pipeline after the step in progress (groups waiting or in flight are not trained)."""
        self._done = True

    async def train(self, *, handle_signals: bool = False) -> None:
        """Run the stages until `max_steps` steps are trained, the scenarios run out, or `request_stop()`.
        handle_signals: accepted for ART's sake (a Ctrl-C ends the run as any other exception)."""
        start = await self.model.get_step()
        self.state = PipelineState.read(self._state_path()) if self.resume and self._state_path() else PipelineState()
        self._gate = PolicyGate(self.max_steps_off_policy, self.claim_limit, start)
        self._done, self._queue = False, asyncio.Queue(maxsize=self.queue_maxsize)
        scenarios = _scenario_iterator(self.scenarios)
        for _ in range(self.state.scenario_offset):  # taken by an earlier run of this model
            if await anext(scenarios, None) is None:
                break
        if self.eval_fn is not None and self.eval_at_start and start not in self.state.evaluated_steps:
            await self._evaluate(start)
        try:
            async with asyncio.TaskGroup() as stages:
                rollouts = stages.create_task(self._rollout_stage(scenarios))
                stages.create_task(self._training_stage(start, rollouts))
        except BaseExceptionGroup as failed:  # the stage's own error (one AutoRLError line), not a group of it
            raise _first(failed) from None

    def _state_path(self) -> Path | None:
        run_dir = getattr(self.backend, "run_dir", None)
        try:
            return Path(run_dir(self.model)) / STATE_FILE if run_dir else None
        except NotImplementedError:
            return None

    async def _rollout_stage(self, scenarios: AsyncIterator[ScenarioT]) -> None:
        """The rollout workers, until the scenarios run out (then the end of the queue is marked)."""
        lock = asyncio.Lock()

        async def worker() -> None:
            while not self._done:
                version = await self._gate.claim(lambda: self._done)
                if self._done:
                    return
                async with lock:
                    scenario = await anext(scenarios, _END)
                    if scenario is _END:
                        await self._gate.release(version)
                        return
                    self.state.scenario_offset += 1
                group = await self.rollout_fn(self.model, scenario, self.config)
                if not isinstance(group, TrajectoryGroup):
                    raise AutoRLError(f"rollout_fn returned {type(group).__name__}, expected autorl.TrajectoryGroup")
                for trajectory in group.trajectories:
                    if trajectory.initial_policy_version is None:
                        trajectory.initial_policy_version = version
                    if trajectory.final_policy_version is None:
                        trajectory.final_policy_version = self.policy_version
                await self._queue.put((version, group))

        async with asyncio.TaskGroup() as workers:
            for _ in range(self.num_rollout_workers):
                workers.create_task(worker())
        await self._queue.put(None)

    async def _training_stage(self, start: int, rollouts: asyncio.Task) -> None:
        step, evaluation = start, None
        try:
            while not self._done and (self.max_steps is None or step < start + self.max_steps):
                batch, stale, tied, ended = await self._collect_batch(step)
                if batch:
                    if evaluation is not None:  # it answers with checkpoint `step`: no update before it ends
                        await evaluation
                    with tracing.span("autorl.step", {"autorl.step": step + 1}) as span:
                        await self._gate.set(step, step + 1)
                        result = await self.backend.train(self.model, batch, config=self.train_config)
                        step = result.step
                        await self._gate.set(step, step)
                        metrics = {**result.metrics, **self.step_metrics(step, batch, stale, tied)}
                        tracing.set_attributes(span, {"autorl.reward": metrics.get("reward")})
                        await self.model.log(batch, split="train", step=step, metrics=metrics)
                        self._save_state()
                        if self.eval_fn is not None and self.eval_every_n_steps and step % self.eval_every_n_steps == 0:
                            evaluation = asyncio.create_task(self._evaluate(step))
                        if self.after_step is not None:
                            await self.after_step(step, batch, metrics)
                if ended or not batch:
                    break
            if evaluation is not None:
                await evaluation
        finally:
            self._done = True
            rollouts.cancel()
            await self._gate.set(self.policy_version, self.policy_version)

    def _save_state(self) -> None:
        """Write `PipelineState` to `STATE_FILE` (after each step and each evaluation), where the backend has a run
        directory on this machine."""
        path = self._state_path()
        if path is not None and path.parent.is_dir():
            atomic_text(path, json.dumps(asdict(self.state)))

    async def _collect_batch(self, step: int) -> tuple[list[TrajectoryGroup], int, int, bool]:
        """The next step's groups: waits for `min_batch_size` usable ones, then takes those waiting up to
        `max_batch_size`; returns them, the stale and tied groups dropped meanwhile, and whether the rollouts ended."""
        from .training.loss import tied

        batch: list[TrajectoryGroup] = []
        stale = ties = 0
        while len(batch) < self.max_batch_size and not self._done:
            if len(batch) < self.min_batch_size:
                item = await self._queue.get()
            else:
                try:
                    item = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
            if item is None:
                return batch, stale, ties, True
            version, group = item
            await self._gate.release(version)
            if not group.trajectories:
                log.warning("PipelineTrainer: a group has no trajectory: %s", (group.exceptions or ["?"])[0])
                self.state.failed_groups += 1
                self._useless_in_a_row += 1
            elif self.staleness(group, step) > self.max_steps_off_policy:
                stale += 1
                self.state.stale_groups += 1
            elif tied([t.reward for t in group.trajectories]):
                ties += 1
                self.state.tied_groups += 1
                self._useless_in_a_row += 1
            else:
                self._useless_in_a_row = 0
                batch.append(group)
            if self._useless_in_a_row >= self.discard_limit:
                log.warning(
                    "PipelineTrainer: %d groups in a row tied or failed: the policy may have collapsed, or the judge "
                    "cannot tell its answers apart; stopping (raise discard_queue_multiplier to go on)",
                    self._useless_in_a_row,
                )
                self._done = True
        return batch, stale, ties, False

    @staticmethod
    def staleness(group: TrajectoryGroup, step: int) -> int:
        """How many policy versions the oldest that sampled `group` is behind `step`, the policy being trained
        (0 for a group without recorded versions)."""
        versions = [t.initial_policy_version for t in group.trajectories if t.initial_policy_version is not None]
        return step - min(versions) if versions else 0

    def step_metrics(self, step: int, batch: list[TrajectoryGroup], stale: int, tied: int) -> dict[str, float]:
        """The pipeline's figures of a step (ART's names where it has them): groups dropped as stale and as tied in
        this step and in the run so far, the staleness of the step's groups (its mean and maximum) and the run's
        histogram of it (`staleness/hist/K`: trained groups sampled K versions before the policy they trained)."""
        ages = [self.staleness(group, step - 1) for group in batch]
        self.state.trained_groups += len(batch)
        for age in ages:
            self.state.staleness[age] = self.state.staleness.get(age, 0) + 1
        made = self.state.trained_groups + self.state.stale_groups + self.state.tied_groups + self.state.failed_groups
        return {
            "discarded/step/stale_groups": float(stale),
            "discarded/step/zero_variance_groups": float(tied),
            "discarded/cum/stale_groups": float(self.state.stale_groups),
            "discarded/cum/zero_variance_groups": float(self.state.tied_groups),
            "discarded/cum/failed_groups": float(self.state.failed_groups),
            "discarded/rate/stale_groups": self.state.stale_groups / max(made, 1),
            "discarded/rate/zero_variance_groups": self.state.tied_groups / max(made, 1),
            "staleness/mean": statistics.fmean(ages),
            "staleness/max": float(max(ages)),
            **{f"staleness/hist/{age}": float(count) for age, count in sorted(self.state.staleness.items())},
            "queue/groups_depth": float(self._queue.qsize()),
        }

    async def _evaluate(self, step: int) -> None:
        """`eval_fn` on checkpoint `step`, logged at that step; a failure is a warning (training goes on)."""
        try:
            result = await self.eval_fn(self.model, step, self.config)
        except Exception as exc:  # as ART's: an evaluation that fails does not stop training
            log.warning("PipelineTrainer: the evaluation of step %d failed: %r", step, exc)
            return
        for split, items in (result if isinstance(result, Mapping) else {"val": result}).items():
            groups = [item for item in items if isinstance(item, TrajectoryGroup)]
            loose = [item for item in items if isinstance(item, Trajectory)]
            await self.model.log([*groups, *([TrajectoryGroup(loose)] if loose else [])], split=split, step=step)
        self.state.evaluated_steps.append(step)
        self._save_state()


def _first(error: BaseException) -> BaseException:
    """The first exception that is not a group of others in `error`."""
    return _first(error.exceptions[0]) if isinstance(error, BaseExceptionGroup) else error


_END = object()
"""The end of the scenarios (`anext`'s default)."""
