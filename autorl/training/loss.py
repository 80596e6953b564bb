"""The GRPO objective: group-relative advantages and the policy losses (`TrainConfig.loss`) over one core.

Every loss shares `clipped_policy_loss` (`policy_terms`): importance ratios against the rollout logprobs (per
token, or per sequence for gspo; ART's levels and shaping of the ratio with `art_knobs.RatioShaping`), their
clip range and clip statistics, an optional KL penalty to the reference policy, and a per-token weight; a
variant (`LOSSES`) only picks the ratio level, the objective and what the update's summed loss is divided by
(`loss_normaliser`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from ..config import LossName, ScaleRewards
from .art_knobs import NO_SHAPING, RatioShaping, importance_ratio, shaped_ratio

TIE_TOLERANCE = 1e-6
"""Rewards of a group closer than this are a tie: the group carries no learning signal."""
STD_FLOOR = 1e-4
"""Added to the standard deviation that divides the advantages (TRL's 1e-4): a group whose rewards differ by
far less than this gets advantages near 0, not +-1."""


@dataclass(frozen=True)
class LossVariant:
    """What a named loss changes in the shared core (see `TrainConfig.loss` for the formulas)."""

    sequence_ratio: bool
    """One importance ratio per sequence, exp(mean of its tokens' log ratios), applied to all its tokens
    and weighted 1 / n_i per token, so that each sequence's loss counts once (GSPO); else one per token."""
    truncated_is: bool
    """-sg(clamp(ratio, 1 - epsilon, epsilon_high)) x A x logprob (CISPO: the weight capped at epsilon_high
    itself, TRL's and ScaleRL's cap) instead of PPO's -min(ratio x A, clip(ratio, 1 - epsilon,
    1 + epsilon_high) x A)."""
    normaliser: Callable[[list[int]], int]
    """The divisor of the update's summed loss, from each sequence's trained-token count."""


def _padded_tokens(trained_tokens: list[int]) -> int:
    return len(trained_tokens) * max(trained_tokens)


LOSSES: dict[str, LossVariant] = {
    "grpo": LossVariant(sequence_ratio=False, truncated_is=False, normaliser=sum),
    "dr_grpo": LossVariant(sequence_ratio=False, truncated_is=False, normaliser=_padded_tokens),
    "dapo": LossVariant(sequence_ratio=False, truncated_is=False, normaliser=sum),
    "gspo": LossVariant(sequence_ratio=True, truncated_is=False, normaliser=len),
    "cispo": LossVariant(sequence_ratio=False, truncated_is=True, normaliser=sum),
}
"""The variants of `TrainConfig.loss`."""


def tied(rewards: list[float], spread: float = 0.0) -> bool:
    """Whether a group's rewards carry no learning signal: fewer than 2, or all within `TIE_TOLERANCE`, or
    within `spread` of each other (the judge's noise: `TrainConfig.tie_spread`)."""
    return len(rewards) < 2 or max(rewards) - min(rewards) < max(TIE_TOLERANCE, spread)


def advantages(
    groups: list[list[float]], scale: ScaleRewards = "group", tie_spread: float = 0.0
) -> list[list[float] | None]:
    """Per group of a step, its rewards minus the group's mean, divided as `TrainConfig.scale_rewards`
    says (group: by the group's population std; batch: by the population std of all the step's rewards;
    none: not divided), a std plus `STD_FLOOR`; None for a group whose rewards tie (`tied`, within
    `tie_spread`: no learning signal)."""
    batch_std = statistics.pstdev([r for rewards in groups for r in rewards]) + STD_FLOOR if scale == "batch" else 1.0
    result: list[list[float] | None] = []
    for rewards in groups:
        if tied(rewards, tie_spread):
            result.append(None)
            continue
        mean = statistics.fmean(rewards)
        std = statistics.pstdev(rewards) + STD_FLOOR if scale == "group" else batch_std
        result.append([(r - mean) / std for r in rewards])
    return result


def overlong_penalty(length: int, max_tokens: int, buffer: int) -> float:
    """DAPO's soft overlong punishment of a completion of `length` tokens: 0 up to max_tokens - buffer
    tokens, then falling linearly to -1 at max_tokens (and -1 past it); 0 when `buffer` is 0."""
    over = length - (max_tokens - buffer)
    return -min(1.0, over / buffer) if buffer > 0 and over > 0 else 0.0


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprob of each token given the ones before it (position t scores input_ids[:, t + 1]), and the
    entropy (nats, no gradient) of the next-token distribution there, or None without `with_entropy`:
    one log-softmax serves both."""
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1), entropy


def _normalised(
    logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool, with_probs: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """From float32 logits [rows, vocabulary]: each row's logprob of its target, its entropy (no gradient; or
    None) and, with `with_probs`, the softmax (a new tensor, no gradient)."""
    normaliser = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - normaliser
    if not (with_entropy or with_probs):
        return logprobs, None, None
    with torch.no_grad():
        probs = (logits - normaliser.unsqueeze(-1)).exp_()
        entropy = normaliser - torch.linalg.vecdot(probs, logits) if with_entropy else None
    return logprobs, entropy, probs if with_probs else None


class _FusedHeadLogprobs(torch.autograd.Function):
    """`head_logprobs` through a frozen linear head, with the gradient: a logprob depends on its own row of
    hidden states only, so each row's d logprob / d hidden is found in the forward, chunk by chunk (the
    softmax is at hand there), and the backward scales it: no [rows, vocabulary] tensor is kept for it."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        rows: torch.Tensor,
        head: torch.nn.Linear,
        targets: torch.Tensor,
        chunk_tokens: int,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logprobs, entropies, slopes = [], [], []
        for i in range(0, len(targets), chunk_tokens):
            chunk = targets[i : i + chunk_tokens]
            logits = torch.nn.functional.linear(rows[i : i + chunk_tokens], head.weight, head.bias).float()
            logprob, entropy, probs = _normalised(logits, chunk, with_entropy, with_probs=True)
            del logits
            # d logprob / d logits = onehot(target) - softmax, cast to the head's dtype (as autograd casts a
            # logits gradient), then back through the head's weight
            probs.neg_()[torch.arange(len(chunk), device=chunk.device), chunk] += 1
            slopes.append(probs.to(head.weight.dtype) @ head.weight)
            logprobs.append(logprob)
            entropies.append(entropy)
        ctx.save_for_backward(torch.cat(slopes))
        ctx.dtype = rows.dtype
        entropy = torch.cat(entropies) if with_entropy else None
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return torch.cat(logprobs), entropy

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_logprobs: torch.Tensor, _: torch.Tensor | None
    ) -> tuple:
        (slopes,) = ctx.saved_tensors
        return (grad_logprobs.unsqueeze(-1) * slopes).to(ctx.dtype), None, None, None, None


def _head_chunk(
    rows: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logprobs, entropy, _ = _normalised(head(rows).float(), targets, with_entropy)
    return logprobs, entropy if with_entropy else logprobs.new_empty(0)


def head_logprobs(
    hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, chunk_tokens: int, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs` from the last hidden states instead of the logits: each position's logprob of its
    target (hidden states [batch, tokens, hidden], targets [batch, tokens]: position t scores targets[:, t])
    and its entropy (nats, no gradient; None without `with_entropy`), the output `head` applied to
    `chunk_tokens` positions at a time: memory holds one chunk's logits (a vocabulary's worth of float32
    numbers per position), never the whole micro-batch's. Logits are made in the head's dtype and
    normalised in float32. Gradients flow to `hidden`, and to the head's weights where they are trained.

    Under a frozen linear head (the usual LM head, with a LoRA or not on the layers below) each position's
    gradient is found during the forward (`_FusedHeadLogprobs`: no matmul more than the plain way); any
    other head's chunks are recomputed in the backward (activation checkpointing).
    """
    shape = targets.shape
    rows, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    chunks = range(0, len(targets), chunk_tokens)
    frozen = isinstance(head, torch.nn.Linear) and not any(p.requires_grad for p in head.parameters())
    if frozen and torch.is_grad_enabled() and rows.requires_grad:
        logprobs, entropy = _FusedHeadLogprobs.apply(rows, head, targets, chunk_tokens, with_entropy)
        return logprobs.reshape(shape), None if entropy is None else entropy.reshape(shape)
    grad = torch.is_grad_enabled() and (rows.requires_grad or any(p.requires_grad for p in head.parameters()))
    parts = [
        checkpoint(_head_chunk, rows[i : i + chunk_tokens], head, targets[i : i + chunk_tokens], with_entropy,
                   use_reentrant=False)
        if grad
        else _head_chunk(rows[i : i + chunk_tokens], head, targets[i : i + chunk_tokens], with_entropy)
        for i in chunks
    ]  # fmt: skip
    logprobs = torch.cat([p[0] for p in parts]).reshape(shape)
    return logprobs, torch.cat([p[1] for p in parts]).reshape(shape) if with_entropy else None


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference): exp(ref - logp) - (ref - logp) - 1, >= 0, 0 where equal."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


def kl_weight(loss: LossName, kl_beta: float, trained_tokens: list[int], all_tokens: list[int]) -> float:
    """The KL coefficient to give `clipped_policy_loss` so that, with its sum divided by the policy term's
    normaliser (over the sequences with an advantage: `trained_tokens`), the KL term comes out averaged over
    every completion of the update (`all_tokens`): kl_beta x normaliser(trained) / normaliser(all)."""
    if not kl_beta:
        return 0.0
    trained = loss_normaliser(loss, trained_tokens) if trained_tokens else loss_normaliser(loss, all_tokens)
    return kl_beta * trained / loss_normaliser(loss, all_tokens)


def loss_normaliser(loss: LossName, trained_tokens: list[int]) -> int:
    """What `loss` divides the update's summed loss by, from each sequence's trained-token count:
    grpo/dapo/cispo their sum, dr_grpo sequences x the longest count, gspo the sequence count."""
    return LOSSES[loss].normaliser(trained_tokens)


def importance_weights(proximal: torch.Tensor, behaviour: torch.Tensor, cap: float | None) -> torch.Tensor:
    """Truncated importance weights of sampled tokens (TIS, as TRL's and prime-rl's losses correct for the
    sampler): min(exp(proximal - behaviour), cap) per token, without gradient; 1 where the behaviour logprob is
    unknown (NaN), and everywhere without a cap (None). `proximal`: the trainer's logprobs of the policy before
    the update; `behaviour`: those of the policy that sampled the token, as the inference server reported them."""
    if cap is None:
        return torch.ones_like(proximal)
    log_ratio = (proximal.detach() - behaviour).nan_to_num(0.0)
    return torch.clamp(torch.exp(log_ratio), max=cap)


def clipped_policy_loss(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """The summed (not yet normalised) loss of one micro-batch, and its statistics: `policy_terms` (which takes
    the same arguments) summed, each token's loss times its weight."""
    per_token, weight, stats = policy_terms(*args, **kwargs)
    return (per_token * weight).sum(), stats


def policy_terms(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float,
    epsilon_high: float,
    loss: LossName = "grpo",
    ref_logprobs: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    behaviour_logprobs: torch.Tensor | None = None,
    importance_sampling_cap: float | None = 2.0,
    shaping: RatioShaping = NO_SHAPING,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Each token's loss under `loss` ([batch, tokens]), each token's weight in the micro-batch's sum (the
    mask; for gspo the mask over the sequence's trained-token count) and the statistics.

    logprobs, old_logprobs, mask (and ref_logprobs): [batch, tokens]; advantages: [batch] (or per token). The grpo
    default is per masked token -min(ratio * A, clip(ratio, 1 - eps, 1 + eps_high) * A).
    Old logprobs that are NaN (unknown) are taken from the current policy, detached, so those tokens
    have ratio 1. cispo's weight is clamp(ratio, 1 - eps, eps_high) (the cap is epsilon_high itself, TRL's
    convention). `shaping` (ART's settings, `RatioShaping`) changes the ratio's level (`importance_ratio`),
    caps or masks it (`shaped_ratio`, the mask's range being the clip's), subtracts tau x sg(log ratio) from
    each token's advantage, and multiplies each policy term by sg(min(ratio, truncated_importance_sampling)).
    With `ref_logprobs`, kl_beta x `k3_kl` joins each token's loss. Divide the sum of loss x weight by
    `loss_normaliser(loss, ...)` over the whole update.
    The stats sum over the masked tokens: clipped tokens (low: the ratio under 1 - eps, high: over
    1 + eps_high, or for cispo over eps_high, counted where clipping changed the objective: for the PPO
    objective only where it zeroes the gradient, for cispo wherever the weight was clamped), the ratio (before
    any cap or mask), the k3 KL (with ref_logprobs), and |logprob - old logprob| over the tokens whose old
    logprob is known: how far the policy being trained is from the one that sampled (the inference server's
    numerics).

    With `behaviour_logprobs` (the logprobs of the policy that sampled, as the inference server reported them;
    NaN where unknown), the off-policy correction (`TrainConfig.importance_sampling_correction`):
    `old_logprobs` are then the trainer's own logprobs of the policy before this update (the proximal policy),
    the clip works on pi / pi_old against them, and each token's policy term is multiplied by the truncated
    importance weight min(pi_old / pi_behaviour, importance_sampling_cap), without gradient (1 where the
    behaviour logprob is unknown, or without a cap); the KL term is not weighted. The stats then add the
    weights' sum and the tokens whose weight was truncated, and the sampler gap is measured against
    `behaviour_logprobs`.
    """
    variant = LOSSES[loss]
    old = torch.where(torch.isnan(old_logprobs), logprobs.detach(), old_logprobs)
    mask = mask.to(logprobs.dtype)
    log_ratio = logprobs - old
    weight = mask / mask.sum(-1, keepdim=True).clamp(min=1) if variant.sequence_ratio else mask
    level = shaping.importance_sampling_level or ("sequence" if variant.sequence_ratio else "token")
    raw_ratio = importance_ratio(log_ratio, mask, level)
    high_bound = epsilon_high if variant.truncated_is else 1 + epsilon_high
    ratio = shaped_ratio(raw_ratio, shaping, 1 - epsilon, high_bound)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages  # [batch, tokens]: credit per turn
    if shaping.kimi_k2_tau:
        adv = adv - shaping.kimi_k2_tau * log_ratio.detach()
    if variant.truncated_is:
        per_token = -torch.clamp(ratio, 1 - epsilon, epsilon_high).detach() * adv * logprobs
        low, high = ratio < 1 - epsilon, ratio > epsilon_high
    else:
        unclipped, clipped = ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high) * adv
        per_token = -torch.minimum(unclipped, clipped)
        active = clipped < unclipped
        low, high = active & (adv < 0), active & (adv > 0)
    if shaping.truncated_importance_sampling is not None:
        per_token = per_token * torch.clamp(ratio, max=shaping.truncated_importance_sampling).detach()
    stats: dict[str, float] = {}
    sampler, sampled = old, old_logprobs  # the sampler's logprobs, known ones filled in; as given
    if behaviour_logprobs is not None:
        sampler = torch.where(torch.isnan(behaviour_logprobs), logprobs.detach(), behaviour_logprobs)
        sampled = behaviour_logprobs
        weights = importance_weights(old, behaviour_logprobs, importance_sampling_cap)
        per_token = per_token * weights
        with torch.no_grad():
            stats["is_weight_sum"] = float((weights * mask).sum())
            cap = math.inf if importance_sampling_cap is None else importance_sampling_cap
            stats["is_truncated_tokens"] = float(((weights >= cap) * mask).sum())
    if ref_logprobs is not None:
        kl = k3_kl(logprobs, ref_logprobs)
        per_token = per_token + kl_beta * kl
        stats["kl_sum"] = float((kl.detach() * mask).sum())
    with torch.no_grad():
        known = mask * ~torch.isnan(sampled)
        stats |= {
            "clipped_low_tokens": float((low * mask).sum()),
            "clipped_high_tokens": float((high * mask).sum()),
            "ratio_sum": float((raw_ratio * mask).sum()),
            "sampler_gap_sum": float(((logprobs - sampler).abs() * known).sum()),
            "sampler_known_tokens": float(known.sum()),
        }
        stats["clipped_tokens"] = stats["clipped_low_tokens"] + stats["clipped_high_tokens"]
    return per_token, weight, stats
