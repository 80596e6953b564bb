"""The GRPO objective: group-relative advantages and the PPO-style clipped token loss."""

from __future__ import annotations

import statistics

import torch

TIE_TOLERANCE = 1e-6
"""Rewards of a group closer than this are a tie: the group carries no learning signal."""


def group_advantages(rewards: list[float], scale: bool = True) -> list[float] | None:
    """Reward minus the group mean (divided by the group std if `scale`); None when all rewards tie."""
    if len(rewards) < 2 or max(rewards) - min(rewards) < TIE_TOLERANCE:
        return None
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards) if scale else 1.0
    return [(r - mean) / std for r in rewards]


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Logprob of each token given the ones before it; position t scores input_ids[:, t + 1]."""
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float,
    epsilon_high: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sum over masked tokens of -min(ratio * A, clip(ratio, 1 - eps, 1 + eps_high) * A).

    logprobs, old_logprobs, mask: [batch, tokens]; advantages: [batch]. Old logprobs that are NaN
    (unknown) are taken from the current policy, detached, so those tokens have ratio 1. Divide
    the returned sum by the number of masked tokens of the whole update for the token-level mean.
    The stats also sum |logprob - old logprob| over the masked tokens whose old logprob is known: how
    far the policy being trained is from the one that sampled (the inference server's numerics).
    """
    old = torch.where(torch.isnan(old_logprobs), logprobs.detach(), old_logprobs)
    ratio = torch.exp(logprobs - old)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    mask = mask.to(per_token.dtype)
    with torch.no_grad():
        known = mask * ~torch.isnan(old_logprobs)
        stats = {
            "clipped_tokens": float(((clipped < unclipped).float() * mask).sum()),
            "ratio_sum": float((ratio * mask).sum()),
            "sampler_gap_sum": float(((logprobs - old).abs() * known).sum()),
            "sampler_known_tokens": float(known.sum()),
        }
    return (per_token * mask).sum(), stats
