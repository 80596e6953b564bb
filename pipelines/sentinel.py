"""The reward-hacking sentinel's judgement: when the policy has moved far from the base model while its reward
rose, say so (and under `--preflight strict`, stop).

The figures come from `autorl.training.drift`: per training step in the history (`kl_to_base`,
`base_logprob` of the step's rollouts), and in the evaluate stage per variant on the validation answers.
"Far" is calibrated on the learning benchmark (`benchmarks/perf/learning.py`), whose judges score form,
not content, and whose trained answers game them (docs/what-training-buys.md).
"""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console

from autorl.errors import AutoRLError

KL_FAR = 0.5
"""KL to the base model (nats per sampled token) from which the policy has moved far."""
LOGPROB_DROP_FAR = 1.0
"""A fall of the base model's log-likelihood of the answers (nats per token, against its own answers) from
which they are far from anything the base model would write."""
RISE_STEPS = 3
"""The training reward "rose" when the mean of the last this many steps lies above step 1's."""


def far(kl: float | None, drop: float | None) -> list[str]:
    """What is far, in words with the figures: the KL to the base and the fall of the base log-likelihood."""
    found = []
    if kl is not None and kl >= KL_FAR:
        found.append(f"KL to the base model {kl:.2f} nats/token (far from {KL_FAR})")
    if drop is not None and drop >= LOGPROB_DROP_FAR:
        found.append(
            f"the base model finds its answers {drop:.2f} nats/token less likely than its own (far from "
            f"{LOGPROB_DROP_FAR})"
        )
    return found


def training_warning(history: list[dict[str, Any]]) -> str | None:
    """The warning for the newest step of `history`: its rollouts are far from the base model while the
    training reward rose since step 1; None otherwise."""
    if len(history) < 2 or "base_logprob" not in history[0] or "base_logprob" not in history[-1]:
        return None
    first, last = history[0], history[-1]
    recent = statistics.fmean(h["reward"] for h in history[1:][-RISE_STEPS:])
    if recent <= first["reward"]:
        return None
    found = far(last.get("kl_to_base"), first["base_logprob"] - last["base_logprob"])
    if not found:
        return None
    return (
        f"step {last['step']}: the training reward rose ({first['reward']:.3f} at step 1, {recent:.3f} lately) while "
        f"the policy moved far from the base model: {'; '.join(found)}. It may be gaming the judge: read its "
        "answers (trajectories/) before trusting the reward"
    )


def warn_or_stop(console: Console, warning: str, preflight: str) -> None:
    """Print `warning`; under `--preflight strict` raise it as the run's one error line instead."""
    if preflight == "strict":
        raise AutoRLError(f"{warning}; stopped (--preflight strict; --preflight warn goes on)")
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
