"""What the train stage does when the reward-hacking sentinel fires (`act_on_drift`, as `--on-drift` says:
warn, stop, or roll back to an earlier checkpoint with a stronger KL penalty), recording each action in the
training directory (`pipelines.records.train.SENTINEL_ACTIONS`, the dropped steps moved to `ROLLED_BACK`, where
the report and the costs read them). Apart from `train` so the step loop reads on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autorl.backends.run_dir import append_history
from autorl.config import TrainConfig
from autorl.training.checkpoints import checkpoint_name, complete_checkpoints

from .. import sentinel
from ..records.train import ROLLED_BACK, SENTINEL_ACTIONS, sentinel_actions
from ..stage_context import StageContext


def adjusted_config(config: TrainConfig, actions: list[dict[str, Any]]) -> TrainConfig:
    """`config` with the KL coefficient and learning rate the newest rollback in `actions` set, if any."""
    rollbacks = [a for a in actions if a["action"] == "rollback"]
    if not rollbacks:
        return config
    return config.model_copy(update={k: rollbacks[-1][k] for k in ("kl_beta", "learning_rate")})


TRAINING_ENDS = -1
"""What `act_on_drift` returns when training ends at the step that drifted (the rollbacks are spent)."""


def training_ended(work: Path) -> bool:
    """Whether the sentinel ended the training in `work` (an "end" action is recorded)."""
    return any(a["action"] == "end" for a in sentinel_actions(work))


async def act_on_drift(ctx: StageContext, warning: str, step: int, train_config: TrainConfig) -> int | None:
    """Do what `--on-drift` says about `warning` (the sentinel fired at `step`), recording the action: warn
    (print it; None), stop (raise it as the run's error), or roll back (returns the checkpoint restored, with the
    settings for the steps after it recorded). A rollback past `max_rollbacks`, or on a backend that cannot roll
    back, ends training at `step` instead (returns `TRAINING_ENDS`): the run goes on to evaluate what it trained,
    and its report says why training ended (a run that learns by moving far from the base model, as a content
    task may, keeps its evaluation; `--on-drift stop` ends the run)."""
    config, work = ctx.config, ctx.policy.run_dir
    action = sentinel.policy(config.sentinel, config.preflight)
    done = sum(a["action"] == "rollback" for a in sentinel_actions(work))
    rollback = getattr(ctx.policy.backend, "rollback", None)
    record: dict[str, Any] = {"step": step, "action": action, "warning": warning}
    if action == "rollback" and (done >= config.sentinel.max_rollbacks or rollback is None):
        why = "this backend cannot roll back" if rollback is None else f"again after {done} rollbacks"
        record |= {"action": "end", "warning": f"{warning}; the policy drifted {why}"}
        append_history(work, record, SENTINEL_ACTIONS)
        ctx.console.print(
            f"[yellow]warning: {record['warning']}: training ends at step {step}, and the run evaluates what it "
            "trained (--on-drift stop ends the run; warn trains on)[/yellow]",
            highlight=False,
        )
        return TRAINING_ENDS
    if action != "rollback":
        append_history(work, record, SENTINEL_ACTIONS)
        sentinel.warn_or_stop(ctx.console, record["warning"], action)
        return None
    existing = [number for number, _ in complete_checkpoints(work / "checkpoints")]
    restored = sentinel.rollback_target(step, existing)
    settings = sentinel.adjusted(train_config.kl_beta, train_config.learning_rate, config.sentinel)
    aside = work / ROLLED_BACK / str(done + 1)
    for number in range(restored + 1, step + 1):  # their groups would be reused by the steps trained again
        for path in (
            work / "steps" / checkpoint_name(number),
            work / "trajectories" / f"{checkpoint_name(number)}.parquet",
        ):
            if path.exists():
                (aside / path.parent.name).mkdir(parents=True, exist_ok=True)
                path.rename(aside / path.parent.name / path.name)
    dropped = await rollback(ctx.policy.model, restored)
    append_history(work, record | {"restored": restored, "dropped": dropped, **settings}, SENTINEL_ACTIONS)
    sentinel.warn_or_stop(ctx.console, warning, action)
    ctx.console.print(
        f"[yellow]rolled back to step {restored} (--on-drift rollback, {done + 1} of at most "
        f"{config.sentinel.max_rollbacks}): training on with kl_beta {settings['kl_beta']:g} and learning rate "
        f"{settings['learning_rate']:g}[/yellow]",
        highlight=False,
    )
    return restored
