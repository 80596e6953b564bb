"""The reward-hacking sentinel's judgement: when the policy has moved far from the base model while its reward
rose, say so, and act as `SentinelConfig.on_drift` says: warn, stop the run, or roll it back to the last
checkpoint before the drift with a stronger KL penalty (or a lower learning rate) and go on.

The figures come from `autorl.training.drift`: per training step in the history (`kl_to_base`,
`base_logprob` of the step's rollouts) on the steps that measure them (step 1 and every
`TrainerConfig.drift_every`-th after, every step with a KL penalty), and in the evaluate stage per variant on
the validation answers.
"Far" is calibrated on the learning benchmark (`benchmarks/perf/sentinel_calibration.py` reads its results:
form-only tasks, whose trained answers game their judges, against content-checked tasks, whose gains are
real), per threshold its precision and recall (`results/sentinel_calibration.json`, docs/training.md).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from autorl.errors import AutoRLError

KL_FAR = 0.5
"""KL to the base model (nats per sampled token, the mean of the last `RISE_STEPS` steps) from which the policy
has moved far."""
LOGPROB_DROP_FAR = 1.0
"""A fall of the base model's log-likelihood of the answers (nats per token: step 1's, which the base model
wrote, minus the mean of the last `RISE_STEPS` steps') from which they are far from anything it would write."""
RISE_STEPS = 3
"""The training reward "rose" when the mean of the last this many steps lies above step 1's; the drift figures
are means over those of the same steps that measured them (one step's base log-likelihood moves by ~0.4 nats
from step to step)."""

OnDrift = Literal["warn", "stop", "rollback"]


class SentinelConfig(BaseModel):
    """What the run does when the sentinel finds the policy far from the base model while its reward rose."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    on_drift: OnDrift = "rollback"
    """warn: print the warning and go on; stop: end the run there with the warning as its error; rollback:
    restore the newest checkpoint from before the steps that drifted, raise the KL coefficient
    (`rollback_kl_beta`) and scale the learning rate (`rollback_lr_factor`), and train on (at most
    `max_rollbacks` times; a drift after them ends training there, and the run goes on to evaluate it). The default is rollback: replayed on the learning benchmark's
    form-only runs, whose trained answers game their judges, the sentinel flags most of them
    (`benchmarks/perf/sentinel_calibration.py`, docs/training.md), where a warning changed nothing (the
    report showed the gain); a rollback acts on that without ending the run, so a run it flags wrongly
    loses a few steps trained again under a KL penalty, not the run. `--preflight strict` with warn
    stops."""
    rollback_kl_beta: float = Field(0.1, ge=0)
    """The KL coefficient (`TrainConfig.kl_beta`) after a rollback: the larger of this and twice the one
    before, so each further rollback doubles it; 0 leaves it as it was."""
    rollback_lr_factor: float = Field(1.0, gt=0, le=1)
    """The learning rate is multiplied by this at each rollback (1: unchanged)."""
    max_rollbacks: int = Field(2, ge=0)
    """Rollbacks a run may take; the next drift ends training at that step (the run evaluates what it trained,
    and its report says why)."""


@dataclass(frozen=True)
class Thresholds:
    """What "far" means: `KL_FAR` and `LOGPROB_DROP_FAR` unless calibrating."""

    kl_far: float = KL_FAR
    logprob_drop_far: float = LOGPROB_DROP_FAR


FAR = Thresholds()


def far(kl: float | None, drop: float | None, thresholds: Thresholds = FAR) -> list[str]:
    """What is far, in words with the figures: the KL to the base and the fall of the base log-likelihood."""
    found = []
    if kl is not None and kl >= thresholds.kl_far:
        found.append(f"KL to the base model {kl:.2f} nats/token (far from {thresholds.kl_far})")
    if drop is not None and drop >= thresholds.logprob_drop_far:
        found.append(
            f"the base model finds its answers {drop:.2f} nats/token less likely than its own (far from "
            f"{thresholds.logprob_drop_far})"
        )
    return found


def training_warning(history: list[dict[str, Any]], thresholds: Thresholds = FAR) -> str | None:
    """The warning for the newest step of `history`: its last `RISE_STEPS` steps' rollouts are far from the base
    model (on average over those steps that measured the figures) while the training reward rose since step 1;
    None otherwise, and on a step without the figures (it is judged at the next step with them)."""
    if len(history) < 2 or "base_logprob" not in history[0] or "base_logprob" not in history[-1]:
        return None
    first, last, recent = history[0], history[-1], history[1:][-RISE_STEPS:]
    reward = statistics.fmean(h["reward"] for h in recent)
    if reward <= first["reward"]:
        return None
    kl = _mean(h.get("kl_to_base") for h in recent)
    logprob = _mean(h.get("base_logprob") for h in recent)
    found = far(kl, None if logprob is None else first["base_logprob"] - logprob, thresholds)
    if not found:
        return None
    return (
        f"step {last['step']}: the training reward rose ({first['reward']:.3f} at step 1, {reward:.3f} lately) while "
        f"the policy moved far from the base model: {'; '.join(found)}. It may be gaming the judge: read its "
        "answers (trajectories/) before trusting the reward"
    )


def _mean(values: Any) -> float | None:
    present = [v for v in values if v is not None and v == v]
    return statistics.fmean(present) if present else None


def first_drift(history: list[dict[str, Any]], thresholds: Thresholds = FAR) -> int | None:
    """The first step at which `training_warning` fires on the history up to it; None if it never does."""
    for end in range(2, len(history) + 1):
        if training_warning(history[:end], thresholds):
            return history[end - 1]["step"]
    return None


def policy(config: SentinelConfig, preflight: str) -> OnDrift:
    """The action a drift takes: `on_drift`, except that warn under `--preflight strict` stops."""
    return "stop" if config.on_drift == "warn" and preflight == "strict" else config.on_drift


def rollback_target(drift_step: int, checkpoints: list[int]) -> int:
    """The checkpoint a rollback restores when step `drift_step` drifted: the newest of `checkpoints` before
    the rollouts the sentinel averaged (steps drift_step - RISE_STEPS + 1 on, sampled from checkpoint
    drift_step - RISE_STEPS on); 0, the base model, when none is left."""
    return max((step for step in checkpoints if step <= drift_step - RISE_STEPS), default=0)


def adjusted(kl_beta: float, learning_rate: float, config: SentinelConfig) -> dict[str, float]:
    """The training settings after one more rollback: the KL coefficient raised, the learning rate scaled."""
    return {
        "kl_beta": max(config.rollback_kl_beta, 2 * kl_beta) if config.rollback_kl_beta else kl_beta,
        "learning_rate": learning_rate * config.rollback_lr_factor,
    }


def warn_or_stop(console: Console, warning: str, action: OnDrift) -> None:
    """Print `warning` (warn, rollback: what follows is said by the rollback); under stop raise it as the run's
    one error line instead."""
    if action == "stop":
        raise AutoRLError(f"{warning}; stopped (--on-drift stop, or --preflight strict; --on-drift warn goes on)")
    console.print(f"[yellow]warning: {warning}[/yellow]", highlight=False)


def evaluation_figures(drift: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per trained variant of the evaluate stage's `drift` (figures per variant), its `kl_to_base` and
    `logprob_vs_base`: its answers' base log-likelihood per token minus the base model's own answers'."""
    base = drift.get("base", {}).get("base_logprob")
    figures = {}
    for variant, values in drift.items():
        if variant == "base" or "base_logprob" not in values:
            continue
        figures[variant] = {
            "kl_to_base": values.get("kl_to_base"),
            "logprob_vs_base": None if base is None else values["base_logprob"] - base,
        }
    return figures


def evaluation_warning(variant: str, gain: float, figures: dict[str, float | None]) -> str | None:
    """The warning for a trained variant whose validation reward rose by `gain` while its answers are far
    from the base model's; None otherwise."""
    relative = figures.get("logprob_vs_base")
    found = far(figures.get("kl_to_base"), None if relative is None else -relative)
    if gain <= 0 or not found:
        return None
    return (
        f"{variant}'s validation reward is {gain:+.3f} over the base model's while its answers are far from the "
        f"base model's: {'; '.join(found)}; it may be gaming the judge: read its answers"
    )
