"""ART's training settings beyond the losses of `TrainConfig.loss`: the importance ratio's level and shaping
(`RatioShaping`, which `loss.clipped_policy_loss` applies), the advantage balance, and the learning-rate
multipliers by trajectory count and by the trend of the reward spread (which the trainer applies).

Apart from `loss` and `trainer` because they are ART's knobs (`autorl.dev.TrainConfig`, docs/art-api.md),
each written to ART's formula and checked against it in tests/test_art_train_knobs.py, while the loss and the
trainer hold autorl's own objective and update.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from ..config import RatioLevel, TrainConfig
from ..trajectories import TrajectoryGroup


@dataclass(frozen=True)
class RatioShaping:
    """ART's settings of the importance ratio and of each token's advantage: the `TrainConfig` fields of the
    same names (their docstrings give the formulas), applied by `clipped_policy_loss` in ART's order: the
    ratio's level, its cap, its mask, then the advantage's tau term; the truncated weight after the objective."""

    importance_sampling_level: RatioLevel | None = None
    max_negative_advantage_importance_sampling_weight: float | None = None
    mask_prob_ratio: bool = False
    kimi_k2_tau: float | None = None
    truncated_importance_sampling: float | None = None

    @classmethod
    def of(cls, config: TrainConfig) -> RatioShaping:
        """The settings `config` gives."""
        return cls(**{field.name: getattr(config, field.name) for field in fields(cls)})


NO_SHAPING = RatioShaping()
"""The ratio and the advantage as they are: every ART setting of `RatioShaping` at its default."""


def importance_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, level: RatioLevel) -> torch.Tensor:
    """The importance ratio at `level` from each token's log ratio ([batch, tokens], `mask` its trained
    tokens): token exp(log r); sequence exp(the sequence's mean log r over its trained tokens), [batch, 1];
    average the mean of the two; geometric_average the square root of their product."""
    if level == "token":
        return torch.exp(log_ratio)
    sequence = torch.exp((log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1))
    if level == "sequence":
        return sequence
    token = torch.exp(log_ratio)
    return (token + sequence) / 2 if level == "average" else token.sqrt() * sequence.sqrt()


def shaped_ratio(ratio: torch.Tensor, shaping: RatioShaping, low: float, high: float) -> torch.Tensor:
    """`ratio` capped (`max_negative_advantage_importance_sampling_weight`) and, with `mask_prob_ratio`, 0
    wherever it lies outside the open range (low, high), the clip range of the loss."""
    if shaping.max_negative_advantage_importance_sampling_weight is not None:
        ratio = torch.clamp(ratio, max=shaping.max_negative_advantage_importance_sampling_weight)
    if shaping.mask_prob_ratio:
        ratio = torch.where((ratio > low) & (ratio < high), ratio, torch.zeros_like(ratio))
    return ratio


def balanced(advantages: list[float], balance: float) -> list[float]:
    """`TrainConfig.advantage_balance` on a group's advantages: above 0 the negative ones times 1 - balance,
    below 0 the positive ones times 1 + balance."""
    if balance > 0:
        return [a if a > 0 else a * (1 - balance) for a in advantages]
    if balance < 0:
        return [a if a < 0 else a * (1 + balance) for a in advantages]
    return advantages


def learning_rate_multiplier(config: TrainConfig, sequences: int, reward_std_history: list[tuple[int, float]]) -> float:
    """What multiplies `config.learning_rate` for an update of `sequences` trained sequences:
    sequences ** `num_trajectories_learning_rate_multiplier_power`, times, with
    `scale_learning_rate_by_reward_std_dev`, `reward_std_trend` of the history's (step, reward_std_dev)."""
    multiplier = float(sequences) ** config.num_trajectories_learning_rate_multiplier_power if sequences else 1.0
    if config.scale_learning_rate_by_reward_std_dev:
        multiplier *= reward_std_trend(reward_std_history)
    return multiplier


def reward_std_trend(history: list[tuple[int, float]]) -> float:
    """ART's reward-spread multiplier: a least-squares line through the per-step means of (step, reward std),
    its value at the last step over its intercept where the intercept is positive; 1 with fewer than 2 steps."""
    by_step: dict[int, list[float]] = {}
    for step, value in history:
        by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    if len(steps) < 2:
        return 1.0
    values = [statistics.fmean(by_step[s]) for s in steps]
    slope, intercept = statistics.linear_regression(steps, values)
    return (slope * steps[-1] + intercept) / intercept if intercept > 0 else 1.0


def reward_std_dev(groups: list[TrajectoryGroup]) -> float:
    """ART's `reward_std_dev` of a step: the mean over its groups of more than one trajectory of their rewards'
    population standard deviation (0 without such a group)."""
    spreads = [statistics.pstdev(t.reward for t in g.trajectories) for g in groups if len(g.trajectories) > 1]
    return statistics.fmean(spreads) if spreads else 0.0


def reward_spreads(history: Path, current: tuple[int | None, float]) -> list[tuple[int, float]]:
    """(step, `reward_std_dev`) of the run's history (`history`, its `history.jsonl`) and of `current`, the
    step being trained (ART logs a step's groups before training on them); its number, where unknown, the
    step after the history's last."""
    lines = history.read_text().splitlines() if history.is_file() else []
    records = [json.loads(line) for line in lines if line.strip().endswith("}")]
    spreads = [(r["step"], r["reward_std_dev"]) for r in records if "reward_std_dev" in r and "step" in r]
    step = current[0] if current[0] is not None else (spreads[-1][0] + 1 if spreads else 1)
    return [*spreads, (step, current[1])]
