"""autorl's loss and its gradient against a transcription of TRL's GRPO loss formulas, for every named loss.

The reference below is written from the formulas of TRL's `GRPOTrainer._compute_loss` and its advantage
computation (TRL 1.x), not from its code: per token, log ratio = logp - old_logp (token level) or the
sequence's mean log ratio (sequence level), r = exp of it;
- grpo/bnpo/dr_grpo/dapo: -min(r A, clamp(r, 1 - epsilon_low, 1 + epsilon_high) A);
- cispo: -sg(min(r, epsilon_high)) A logp;
plus beta x k3, k3 = exp(ref - logp) - (ref - logp) - 1 (x r with `use_bias_correction_kl`); then
- grpo: each sequence's masked mean, averaged over sequences;
- bnpo/dapo/cispo: the masked sum over the batch's token count;
- dr_grpo: the masked sum over batch size x max_completion_length.
Advantages: reward minus the group's mean, over (sample std + 1e-4) for scale "group" / "batch".

autorl's settings for each loss (`SETTINGS`) are the ones a TRL user would pass; the conventions where
autorl differs on purpose (`autorl.training.loss`'s docstring) are each checked as the stated difference.
"""

import math

import pytest
import torch

from autorl import TrainConfig
from autorl.training.loss import (
    STD_FLOOR,
    advantages,
    clipped_policy_loss,
    kl_weight,
    loss_normaliser,
)

GROUP = 4
LENGTHS = [5, 3, 7, 2, 6, 4, 7, 1]  # trained tokens of the 8 sequences (2 groups of 4), padded to 7


def trl_advantages(rewards: torch.Tensor, scale: str, bessel: bool = True) -> torch.Tensor:
    """TRL's advantages for rewards laid out group after group (`bessel=False`: autorl's population std)."""
    grouped = rewards.view(-1, GROUP)
    centred = (grouped - grouped.mean(1, keepdim=True)).view(-1)
    if scale == "none":
        return centred
    std = grouped.std(1, correction=int(bessel)).repeat_interleave(GROUP) if scale == "group" else None
    if scale == "batch":
        std = rewards.std(correction=int(bessel)).expand_as(rewards)
    return centred / (std + 1e-4)


def trl_loss(logp, old, ref, adv, mask, *, loss_type, epsilon_low, epsilon_high, beta=0.0, level="token",
             max_completion_length=None, bias_correction_kl=False):  # fmt: skip
    """TRL's GRPO loss of one batch (one process, no gradient accumulation), from its formulas."""
    adv = adv.unsqueeze(1)
    log_ratio = logp - old
    if level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    ratio = torch.exp(log_ratio)
    if loss_type == "cispo":
        per_token = -torch.clamp(ratio, max=epsilon_high).detach() * adv * logp
    else:
        per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv)
    if beta:
        kl = torch.exp(ref - logp) - (ref - logp) - 1
        per_token = per_token + beta * (kl * ratio if bias_correction_kl else kl)
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dr_grpo":
        return (per_token * mask).sum() / (per_token.shape[0] * max_completion_length)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)  # bnpo, dapo, cispo


SETTINGS = {
    # autorl loss: (TRL's loss_type and importance sampling level, the shared settings)
    "grpo": ({"loss_type": "dapo"}, {"epsilon": 0.2, "epsilon_high": 0.28}),  # TRL's "grpo" averages per sequence
    "dapo": ({"loss_type": "dapo"}, {"epsilon": 0.2, "epsilon_high": 0.28}),
    "dr_grpo": (
        {"loss_type": "dr_grpo", "max_completion_length": max(LENGTHS)},
        {"epsilon": 0.2, "epsilon_high": 0.28},
    ),
    "gspo": ({"loss_type": "grpo", "level": "sequence"}, {"epsilon": 3e-4, "epsilon_high": 4e-4}),
    "cispo": ({"loss_type": "cispo"}, {"epsilon": 1.0, "epsilon_high": 5.0}),
}


def batch(seed: int = 0):
    """8 sequences in 2 groups of 4 (float64): logprobs, sampling logprobs ~0.4 nats off (ratios on both
    sides of every clip range, two past cispo's cap), reference logprobs, the mask, and judged rewards."""
    generator = torch.Generator().manual_seed(seed)
    shape = (len(LENGTHS), max(LENGTHS))
    logp = -torch.rand(shape, generator=generator, dtype=torch.float64) * 4 - 0.05
    old = logp + torch.randn(shape, generator=generator, dtype=torch.float64) * 0.4
    ref = logp + torch.randn(shape, generator=generator, dtype=torch.float64) * 0.3
    old[0, :2] = logp[0, :2] - 2.0  # ratios e^2 = 7.4: over cispo's cap too
    mask = torch.tensor([[1.0] * n + [0.0] * (shape[1] - n) for n in LENGTHS], dtype=torch.float64)
    rewards = torch.rand(len(LENGTHS), generator=generator, dtype=torch.float64)
    return logp, old, ref, mask, rewards


def autorl_update_loss(logp, loss, old, ref, adv, mask, beta, *, epsilon, epsilon_high):
    """autorl's normalised loss of the update, as the trainer forms it: the core's sum over the policy
    term's normaliser (sequences with an advantage), the KL weighted to average over every sequence."""
    tokens = [int(n) for n in mask.sum(-1)]
    trained = [n for n, a in zip(tokens, adv.tolist(), strict=True) if a != 0]
    total, _ = clipped_policy_loss(
        logp, old, adv, mask, epsilon, epsilon_high, loss=loss,
        ref_logprobs=ref if beta else None, kl_beta=kl_weight(loss, beta, trained, tokens),
    )  # fmt: skip
    return total / loss_normaliser(loss, trained or tokens)


def loss_and_gradient(function, logp, *args, **kwargs):
    leaf = logp.clone().requires_grad_(True)
    value = function(leaf, *args, **kwargs)
    value.backward()
    return value.detach(), leaf.grad


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss", list(SETTINGS))
def test_every_loss_and_its_gradient_match_trls_formulas(loss, beta):
    trl, shared = SETTINGS[loss]
    assert {k: getattr(TrainConfig(loss=loss), k) for k in shared} == pytest.approx(shared)  # autorl's defaults
    logp, old, ref, mask, rewards = batch()
    adv = trl_advantages(rewards, "none" if loss == "dr_grpo" else "group")
    ours = loss_and_gradient(autorl_update_loss, logp, loss, old, ref, adv, mask, beta, **shared)
    theirs = loss_and_gradient(
        trl_loss, logp, old, ref, adv, mask, beta=beta, epsilon_low=shared["epsilon"],
        epsilon_high=shared["epsilon_high"], **trl,
    )  # fmt: skip
    assert float(ours[0]) == pytest.approx(float(theirs[0]), rel=1e-12, abs=1e-15)
    assert torch.allclose(ours[1], theirs[1], rtol=1e-10, atol=1e-15)
    ratio = torch.exp(logp - old)[mask.bool()]  # the batch reaches past the clip range on both sides
    high = shared["epsilon_high"] if loss == "cispo" else 1 + shared["epsilon_high"]
    assert (ratio > high).any() and (loss == "cispo" or (ratio < 1 - shared["epsilon"]).any())


def test_cispo_caps_the_weight_at_epsilon_high_itself_as_trl_does():
    logp, old, ref, mask, rewards = batch(1)
    old = logp - 1.2  # every ratio e^1.2 = 3.32
    adv = trl_advantages(rewards, "group")
    for cap in (2.0, 5.0):
        ours = autorl_update_loss(logp, "cispo", old, ref, adv, mask, 0.0, epsilon=1.0, epsilon_high=cap)
        theirs = trl_loss(logp, old, ref, adv, mask, loss_type="cispo", epsilon_low=1.0, epsilon_high=cap)
        assert float(ours) == pytest.approx(float(theirs), rel=1e-12)
    capped = autorl_update_loss(logp, "cispo", old, ref, adv, mask, 0.0, epsilon=1.0, epsilon_high=2.0)
    free = autorl_update_loss(logp, "cispo", old, ref, adv, mask, 0.0, epsilon=1.0, epsilon_high=5.0)
    assert float(capped) == pytest.approx(float(free) * 2.0 / math.exp(1.2), rel=1e-12)  # weight 2, not 3 or 3.32


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_are_trls_with_the_population_std(scale):
    _, _, _, _, rewards = batch(2)
    ours = torch.tensor(
        [a for g in advantages(rewards.view(-1, GROUP).tolist(), scale) for a in g], dtype=torch.float64
    )
    assert torch.allclose(ours, trl_advantages(rewards, scale, bessel=False), rtol=1e-12)
    if scale == "group":  # TRL's sample std is sqrt(G / (G - 1)) larger: its advantages x0.866 at G = 4
        ratio = trl_advantages(rewards, scale) / ours
        assert torch.allclose(ratio, torch.full_like(ratio, math.sqrt((GROUP - 1) / GROUP)), rtol=1e-3)


def test_a_near_tied_group_gets_advantages_near_zero_as_in_trl():
    rewards = torch.tensor([0.5, 0.5, 0.50002, 0.50002], dtype=torch.float64)  # 2e-5 apart: judge noise
    ours = advantages([rewards.tolist()])[0]
    theirs = trl_advantages(rewards, "group")
    assert max(abs(a) for a in ours) < 0.1  # without the floor: +-1
    assert ours == pytest.approx((theirs * (1e-5 * math.sqrt(4 / 3) + STD_FLOOR) / (1e-5 + STD_FLOOR)).tolist())


@pytest.mark.parametrize("loss", ["grpo", "dapo", "cispo", "dr_grpo", "gspo"])
def test_sequences_without_signal_leave_the_policy_term_alone_and_pay_the_kl(loss):
    """A tied group (advantage 0 throughout): TRL counts it in the normaliser and the KL; autorl divides the
    policy term by the sequences with signal only, and averages the KL over every completion, as TRL does."""
    trl, shared = SETTINGS[loss]
    logp, old, ref, mask, rewards = batch(3)
    rewards[GROUP:] = 0.7  # the second group ties
    adv = trl_advantages(rewards, "none" if loss == "dr_grpo" else "group")
    assert (adv[GROUP:] == 0).all()
    beta = 0.04
    trl_kwargs = {"epsilon_low": shared["epsilon"], "epsilon_high": shared["epsilon_high"], **trl}
    policy = loss_and_gradient(trl_loss, logp, old, ref, adv, mask, **trl_kwargs)
    with_kl = loss_and_gradient(trl_loss, logp, old, ref, adv, mask, beta=beta, **trl_kwargs)
    kl = (with_kl[0] - policy[0], with_kl[1] - policy[1])
    tokens = [int(n) for n in mask.sum(-1)]
    scale = loss_normaliser(loss, tokens) / loss_normaliser(loss, tokens[:GROUP])  # TRL's normaliser / autorl's
    if loss == "dr_grpo":  # TRL divides by max_completion_length, the whole batch's longest; autorl by the trained's
        scale = len(tokens) * max(LENGTHS) / (GROUP * max(tokens[:GROUP]))
    ours = loss_and_gradient(autorl_update_loss, logp, loss, old, ref, adv, mask, beta, **shared)
    assert float(ours[0]) == pytest.approx(float(policy[0] * scale + kl[0]), rel=1e-12)
    assert torch.allclose(ours[1], policy[1] * scale + kl[1], rtol=1e-10, atol=1e-15)
    without_kl = loss_and_gradient(autorl_update_loss, logp, loss, old, ref, adv, mask, 0.0, **shared)
    assert float(without_kl[0]) == pytest.approx(float(policy[0] * scale), rel=1e-12)
    assert not without_kl[1][GROUP:].any()  # no gradient on the tied group without the KL
