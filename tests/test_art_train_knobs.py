"""Every training setting of ART's `dev.TrainConfig` against ART's own formula, on the same tensors (float64).

The reference below is written from the math of ART 0.5.18's `loss.py` (`loss_fn`), `preprocessing/pack.py`
(`advantage_balance`), `unsloth/train.py` (`num_trajectories_learning_rate_multiplier_power`) and the
LocalBackend's reward-spread learning-rate multiplier (`scale_learning_rate_by_reward_std_dev`), not from
its code. Per token, with r the importance ratio against the old logprobs (an unknown old logprob: the
current one, detached), A the advantage:
- importance_sampling_level: token r; sequence s = exp(mean over the sequence's trained tokens of log r);
  average (r + s) / 2; geometric_average sqrt(r) sqrt(s);
- max_negative_advantage_importance_sampling_weight W: r <- min(r, W);
- mask_prob_ratio: r <- r where 1 - eps < r < 1 + eps_high, else 0;
- kimi_k2_tau t: A <- A - t sg(log r_token);
- ppo: -min(r A, clip(r, 1 - eps, 1 + eps_high) A), eps 0.2, eps_high = eps unless given; else
  -sg(clip(r, 1 - eps, 1 + eps_high)) A logp, eps 1, eps_high 4;
- truncated_importance_sampling C: the term x sg(min(w, C)), w = r, or with precalculate_logprobs
  exp(pi_old - pi_sampler) (pi_old the logprobs precomputed before the update);
- ART's reduction: each trajectory's tokens weighted 1 / its trained tokens, rescaled to mean 1 over the
  trained tokens, the sum over the trained tokens' count.
autorl takes the settings through `autorl.dev.train_settings`, as `model.train(_config=...)` and
`backend.train(**keywords)` do; agreement is to 1e-6 on each token's loss and on the gradient.
"""

import math

import numpy as np
import pytest
import torch

import autorl as art
from autorl import TrainerConfig
from autorl.dev import REFUSED_UNLESS_DEFAULT, train_config_updates, train_keywords, train_settings
from autorl.errors import UnsupportedArgumentError
from autorl.training.art_knobs import (
    RatioShaping,
    balanced,
    learning_rate_multiplier,
    reward_std_dev,
    reward_std_trend,
)
from autorl.training.loss import clipped_policy_loss, loss_normaliser, policy_terms
from autorl.training.trainer import GRPOTrainer
from tests.helpers.training import groups

LENGTHS = [5, 3, 7, 2]  # trained tokens of each sequence, padded to 7
TOLERANCE = 1e-6


def tensors(seed: int = 0):
    """New logprobs (a leaf), old ones (some unknown), per-sequence advantages and the trained-token mask."""
    generator = torch.Generator().manual_seed(seed)
    shape = (len(LENGTHS), max(LENGTHS))
    old = -torch.rand(shape, generator=generator, dtype=torch.float64) * 3 - 0.05
    new = (old + torch.randn(shape, generator=generator, dtype=torch.float64) * 0.3).clamp(max=-1e-3)
    old[0, 1] = old[2, 4] = math.nan
    mask = torch.zeros(shape, dtype=torch.float64)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
    advantages = torch.tensor([1.2, -0.7, 0.4, -1.5], dtype=torch.float64)
    return new.requires_grad_(), old, advantages, mask


def art_token_loss(new, old, advantages, mask, config, original=None):
    """ART's per-token policy loss (before its weights and mask), from ART's formulas (module docstring)."""
    old = torch.where(torch.isnan(old), new.detach(), old)
    diff = new - old
    adv = advantages.unsqueeze(-1).expand_as(new).clone()
    r = torch.exp(diff)
    level = config.get("importance_sampling_level", "token")
    if level != "token":
        s = torch.exp((diff * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True))
        r = {"sequence": s.expand_as(r), "average": (r + s) / 2, "geometric_average": r**0.5 * s**0.5}[level]
    ppo = config.get("ppo", False)
    eps = config.get("epsilon", 0.2 if ppo else 1.0)
    eps_high = config.get("epsilon_high", None if ppo else 4.0)
    eps_high = eps if eps_high is None else eps_high
    if config.get("max_negative_advantage_importance_sampling_weight"):
        r = torch.clamp(r, max=config["max_negative_advantage_importance_sampling_weight"])
    if config.get("mask_prob_ratio"):
        r = torch.where((r > 1 - eps) & (r < 1 + eps_high), r, 0.0)
    if config.get("kimi_k2_tau"):
        adv = adv - config["kimi_k2_tau"] * diff.detach()
    if ppo:
        loss = -torch.min(r * adv, torch.clip(r, 1 - eps, 1 + eps_high) * adv)
    else:
        loss = -(torch.clip(r.detach(), 1 - eps, 1 + eps_high) * adv * new)
    if cap := config.get("truncated_importance_sampling"):
        if original is not None:
            original = torch.where(torch.isnan(original), new.detach(), original)
            r = torch.exp(old - original)
        loss = loss * torch.clamp(r, max=cap).detach()
    return loss


def autorl_token_loss(new, old, advantages, mask, art_config, behaviour=None):
    """autorl's per-token loss under the `TrainConfig` that ART's settings map onto."""
    config = art.TrainConfig(**train_settings(art_config))
    high = config.epsilon if config.epsilon_high is None else config.epsilon_high
    correction = {}
    if config.importance_sampling_correction:
        correction = {"behaviour_logprobs": behaviour, "importance_sampling_cap": config.importance_sampling_cap}
    per_token, _, _ = policy_terms(
        new, old, advantages, mask, config.epsilon, high, loss=config.loss, shaping=RatioShaping.of(config),
        **correction,
    )  # fmt: skip
    return per_token


def assert_agree(ours: torch.Tensor, theirs: torch.Tensor, new: torch.Tensor, mask: torch.Tensor) -> None:
    """The masked per-token losses and their gradients with respect to the new logprobs agree."""
    ours, theirs = ours.expand_as(mask) * mask, theirs.expand_as(mask) * mask
    assert (ours - theirs).abs().max() <= TOLERANCE
    (grad_ours,) = torch.autograd.grad(ours.sum(), new, retain_graph=True)
    (grad_theirs,) = torch.autograd.grad(theirs.sum(), new, retain_graph=True)
    assert (grad_ours - grad_theirs).abs().max() <= TOLERANCE
    assert ours.abs().sum() > 0


SETTINGS = [
    {},
    {"epsilon": 0.1, "epsilon_high": 0.3},
    {"importance_sampling_level": "sequence"},
    {"importance_sampling_level": "average"},
    {"importance_sampling_level": "geometric_average"},
    {"max_negative_advantage_importance_sampling_weight": 1.05},
    {"mask_prob_ratio": True, "epsilon": 0.15, "epsilon_high": 0.2},
    {"kimi_k2_tau": 0.3},
    {"truncated_importance_sampling": 1.02},
    {"importance_sampling_level": "geometric_average", "max_negative_advantage_importance_sampling_weight": 1.2,
     "mask_prob_ratio": True, "epsilon": 0.2, "epsilon_high": 0.25, "kimi_k2_tau": 0.1,
     "truncated_importance_sampling": 1.1},
]  # fmt: skip


@pytest.mark.parametrize("ppo", [True, False])
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(s) or "defaults")
def test_each_setting_computes_art_s_formula(settings, ppo):
    new, old, advantages, mask = tensors()
    config = {**settings, "ppo": ppo}
    assert_agree(autorl_token_loss(new, old, advantages, mask, config),
                 art_token_loss(new, old, advantages, mask, config), new, mask)  # fmt: skip


def test_the_settings_change_the_loss():
    """Each setting is in effect: at the tensors above it moves the loss away from the defaults'."""
    new, old, advantages, mask = tensors()
    plain = autorl_token_loss(new, old, advantages, mask, {"ppo": True, "epsilon": 0.15}) * mask
    for settings in SETTINGS[2:]:
        changed = autorl_token_loss(new, old, advantages, mask, {"ppo": True, "epsilon": 0.15, **settings}) * mask
        assert (changed - plain.expand_as(changed)).abs().max() > 1e-4, settings


@pytest.mark.parametrize("cap", [None, 1.05])
def test_precalculated_logprobs_with_and_without_truncated_importance_sampling(cap):
    """ART's precalculate_logprobs: the ratio is taken against the policy before the update (its logprobs
    precomputed), the sampler's own logprobs weighting each term, min(exp(pi_old - pi_sampler), C), where
    truncated_importance_sampling is C (autorl's importance_sampling_correction)."""
    new, sampler, advantages, mask = tensors()
    proximal = new.detach() + torch.randn(new.shape, generator=torch.Generator().manual_seed(1),
                                          dtype=torch.float64) * 0.05  # fmt: skip
    unknown = torch.isnan(sampler)
    proximal[unknown] = new.detach()[unknown]  # as precomputed: where the sampler's is unknown, they agree
    config = {"ppo": True, "precalculate_logprobs": True}
    if cap:
        config["truncated_importance_sampling"] = cap
    ours = autorl_token_loss(new, proximal, advantages, mask, config, behaviour=sampler)
    assert_agree(ours, art_token_loss(new, proximal, advantages, mask, config, original=sampler), new, mask)


def test_art_s_reduction_is_autorl_s_per_sequence_mean_where_the_ratio_is_the_sequence_s():
    """ART weights each trajectory's tokens by 1 / their count (then rescales the weights to mean 1 and divides
    by the token count): a per-sequence mean over sequences, which is gspo's normaliser."""
    new, old, advantages, mask = tensors()
    config = {"ppo": True, "importance_sampling_level": "sequence", "epsilon": 0.2}
    weights = mask / mask.sum(-1, keepdim=True)
    weights = weights / weights[mask.bool()].mean()
    theirs = (art_token_loss(new, old, advantages, mask, config) * weights * mask).sum() / mask.sum()
    summed, _ = clipped_policy_loss(new, old, advantages, mask, 0.2, 0.2, loss="gspo")
    ours = summed / loss_normaliser("gspo", LENGTHS)
    assert abs(float((ours - theirs).detach())) <= TOLERANCE


@pytest.mark.parametrize("balance", [-1.0, -0.4, 0.0, 0.3, 1.0])
def test_advantage_balance_is_art_s(balance):
    advantages = torch.tensor([1.5, -0.2, 0.0, -1.1, 0.7], dtype=torch.float64)
    if balance > 0:  # ART's pack.py, before its rescaling of every advantage by their mean magnitude
        theirs = torch.where(advantages > 0, advantages, advantages * (1 - balance))
    elif balance < 0:
        theirs = torch.where(advantages < 0, advantages, advantages * (1 + balance))
    else:
        theirs = advantages
    ours = torch.tensor(balanced(advantages.tolist(), balance), dtype=torch.float64)
    assert (ours - theirs).abs().max() <= TOLERANCE


@pytest.mark.parametrize("power", [0.0, 0.5, -1.0, 1.0])
def test_the_trajectory_count_learning_rate_multiplier_is_art_s(power):
    """ART counts a packed sequence's trajectories as its distinct group ids less its distinct parent (prompt)
    ids; autorl's update trains its sequences in one optimizer step, and counts them."""
    prompt, results = 7, [101, 102, 103]
    group_ids = [prompt] * 4 + [i for r in results for i in [r] * 3] + [-1] * 2
    parent_ids = [prompt] * (4 + 3 * len(results)) + [-1] * 2
    theirs = (torch.unique(torch.tensor(group_ids)).numel() - torch.unique(torch.tensor(parent_ids)).numel()) ** power
    config = art.TrainConfig(**train_settings({"num_trajectories_learning_rate_multiplier_power": power}))
    assert abs(learning_rate_multiplier(config, len(results), []) - theirs) <= TOLERANCE


def test_the_reward_spread_learning_rate_multiplier_is_art_s():
    history = [(1, 0.30), (1, 0.34), (2, 0.28), (3, 0.22), (4, 0.25), (5, 0.18)]
    steps = np.array(sorted({s for s, _ in history}), dtype=float)
    means = np.array([np.mean([v for s, v in history if s == step]) for step in steps])
    slope, intercept = np.polyfit(steps, means, deg=1)  # ART: the fit's last-step value over its intercept
    theirs = (slope * steps[-1] + intercept) / intercept
    assert abs(reward_std_trend(history) - theirs) <= TOLERANCE
    assert reward_std_trend(history[:2]) == 1.0  # one step: ART's prior
    config = art.TrainConfig(scale_learning_rate_by_reward_std_dev=True)
    assert abs(learning_rate_multiplier(config, 4, history) - theirs) <= TOLERANCE


def test_reward_std_dev_is_art_s_step_figure():
    rewards = [[0.0, 1.0, 0.5], [0.2, 0.2], [0.9]]  # the lone trajectory's group has no spread and is left out
    made = [art.TrajectoryGroup([art.Trajectory(messages_and_choices=[], reward=r) for r in g]) for g in rewards]
    theirs = np.mean([np.std(g) for g in rewards if len(g) > 1])
    assert abs(reward_std_dev(made) - theirs) <= TOLERANCE


def test_art_s_epsilon_high_maps_onto_autorl_s_cap_and_ppo_onto_its_loss():
    assert train_settings({"ppo": False, "epsilon_high": 3.0}) == {"loss": "cispo", "epsilon_high": 4.0}
    assert train_settings({"ppo": True}) == {"loss": "grpo", "epsilon_high": None}
    assert art.TrainConfig(**train_settings({"ppo": True, "epsilon": 0.1})).epsilon_high is None  # = epsilon
    assert art.TrainConfig(**train_settings({"ppo": False})).epsilon_high == 5.0  # ART's 1 + 4
    config = train_keywords(None, {"loss_fn": "ppo", "importance_sampling_level": "average", "kimi_k2_tau": 0.2})[0]
    assert (config.loss, config.importance_sampling_level, config.kimi_k2_tau) == ("grpo", "average", 0.2)
    assert train_config_updates({"precalculate_logprobs": True}) == {
        "importance_sampling_correction": True, "importance_sampling_cap": None}  # fmt: skip


@pytest.mark.parametrize("key", sorted(REFUSED_UNLESS_DEFAULT))
def test_a_setting_that_cannot_apply_is_refused_in_one_line_naming_why(key):
    default, why = REFUSED_UNLESS_DEFAULT[key]
    assert train_settings({key: default}) == {}  # ART's default is what autorl computes
    value = {None: 1, False: True, 1024: 512, "current_learner": "sample"}[default]
    for call in (lambda: train_config_updates({key: value}), lambda: train_keywords(None, {key: value})):
        with pytest.raises(UnsupportedArgumentError, match=key) as raised:
            call()
        assert "\n" not in str(raised.value) and why in str(raised.value)


def test_the_trainer_trains_with_art_s_settings(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", TrainerConfig(seed=0, dtype="float32"))
    config = art.TrainConfig(learning_rate=1e-3, num_trajectories_learning_rate_multiplier_power=0.5,
                             advantage_balance=0.5, mask_prob_ratio=True, kimi_k2_tau=0.1)  # fmt: skip
    metrics = trainer.step(groups(trainer.tokenizer), config)  # 2 groups of 4, rewards 0-3: 8 trained sequences
    assert metrics["learning_rate"] == pytest.approx(1e-3 * 8**0.5)
    assert metrics["reward_std_dev"] == pytest.approx(np.std([0, 1, 2, 3]))
    assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
