"""What a training step does once its update is written, the same in the synchronous loop and in `--async`'s
`after_step` (`close_step`): the checkpoints `keep_checkpoints` leaves out deleted, what the step took
(`STEP_COST`, from its `StepStart`) written and given to its `autorl.step` span, its metrics to the trackers, its
console line, the reward-hacking sentinel read (`Watch`: when it fires the caller acts) and the run's budget
checked."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autorl import tracing
from autorl.atomic import atomic_text
from autorl.backends.run_dir import read_history
from autorl.errors import AutoRLError
from autorl.training.checkpoints import checkpoint_name

from .. import costs, sentinel
from ..artifacts import canonical_json
from ..config import RunConfig
from ..records.pricing import Reading
from ..records.step_costs import STEP_COST, cost_metrics, step_cost
from ..records.train import VAL_METRIC, rl_history, sentinel_actions, validated_steps
from ..stage_context import StageContext

OnDrift = Callable[[str], Awaitable[None]]
"""What the training loop does when the sentinel fires after a step (its warning given)."""


@dataclass
class StepStart:
    """Where a step's cost counts from: the time, the model calls made so far and the meter's reading."""

    time: float
    calls: Counter
    reading: Reading

    @classmethod
    def now(cls, ctx: StageContext) -> StepStart:
        return cls(
            time.monotonic(), Counter(ctx.calls), ctx.policy.meter.reading(ctx.judge_calls(), ctx.generator_calls)
        )


class Watch:
    """The sentinel over a training (`pipelines.sentinel`), as its recorded actions leave it: it warns once, and
    after a rollback it reads the history again only once `RISE_STEPS` steps were trained from the restored
    checkpoint."""

    def __init__(self, work: Path):
        actions = sentinel_actions(work)
        self.warned = any(a["action"] == "warn" for a in actions)
        rollbacks = [a for a in actions if a["action"] == "rollback"]
        self.watch_from = rollbacks[-1]["restored"] + sentinel.RISE_STEPS if rollbacks else 0

    def restored(self, step: int) -> None:
        """Training goes on from checkpoint `step` (a rollback)."""
        self.watch_from = step + sentinel.RISE_STEPS

    def warning(self, step: int, history: list[dict[str, Any]]) -> str | None:
        """The sentinel's warning after `step` (`history` the RL steps'), None while it is not watching."""
        if self.warned or step <= self.watch_from:
            return None
        return sentinel.training_warning(history)


async def close_step(
    ctx: StageContext,
    step: int,
    last: int,
    metrics: dict[str, Any],
    start: StepStart,
    said: str,
    watch: Watch,
    on_drift: OnDrift,
    *,
    made_earlier: list[dict[str, Any]] | None = None,
    logged: dict[str, Any] | None = None,
) -> None:
    """The bookkeeping after step `step`'s update (its checkpoint written): the checkpoints kept, its cost since
    `start` (plus the groups' costs `made_earlier`, by an earlier process) in `steps/NNNN/STEP_COST` and on the
    current `autorl.step` span with its reward, `metrics` and `logged` to the trackers, its line on the console
    (`said` between the reward and loss and the update's time), the unscored steps and the sentinel checked
    (`on_drift` awaited with its warning), and last the run's budget (`costs.BudgetReached`: a clean stop)."""
    config, work = ctx.config, ctx.policy.run_dir
    if config.keep_checkpoints != "all":
        await ctx.policy.model.delete_checkpoints(best_metric(config, work), keep=config.keep_checkpoints)
    cost = step_cost(time.monotonic() - start.time, ctx.calls - start.calls, made_earlier or [])
    cost["spent"] = ctx.policy.meter.since(start.reading, ctx.judge_calls(), ctx.generator_calls, config.price_per_hour)
    (work / "steps" / checkpoint_name(step)).mkdir(parents=True, exist_ok=True)
    atomic_text(work / "steps" / checkpoint_name(step) / STEP_COST, canonical_json(cost))
    usd = cost["spent"]["usd"]["total"]
    tracing.set_attributes(tracing.current(), {"autorl.reward": metrics["reward"], "autorl.usd": usd})
    ctx.tracker.log({**metrics, **cost_metrics(cost["spent"]), **(logged or {})}, step)
    ctx.console.print(
        f"step {step}/{last}  reward {metrics['reward']:.3f} ± {metrics['reward_std']:.3f}  "
        f"loss {metrics['loss']:+.4f}  {said}  train {metrics['step_time_s']:.1f}s"
    )
    history = rl_history(read_history(work))
    check_unscored_steps(history, config.max_unscored_steps)
    if warning := watch.warning(step, history):
        await on_drift(warning)
    costs.check_run_budget(ctx, f"step {step}")  # the step's checkpoint is written: a clean stop


def check_unscored_steps(history: list[dict], limit: int) -> None:
    """Raise when in the last `limit + 1` steps of `history` the judge scored no group (no limit when
    `limit` is 0). Counted from the history, so a resumed run counts the steps before the kill too."""
    unscored = 0
    for entry in reversed(history):
        if entry["groups"] > 0:
            break
        unscored += 1
    if limit and unscored > limit:
        raise AutoRLError(
            f"in {unscored} training steps in a row the judge scored no group (see its warnings above): fix "
            "the judge or its endpoint, or raise --max-unscored-steps"
        )


def best_metric(config: RunConfig, run_dir: Path) -> str:
    """What the best checkpoint is best by (`delete_checkpoints`' name for it): the validation reward once
    training validated a step (`pipelines.steps.validation`), else the mean training reward of its step, as
    `train.best_step` picks it (before the first validation, retention would warn that none was logged)."""
    return VAL_METRIC if config.validate_every and validated_steps(run_dir) else "train/reward"
