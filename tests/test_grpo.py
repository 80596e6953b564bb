"""Group-relative advantages and the GRPO loss variants, against hand-computed values."""

import math

import pytest
import torch

from autorl import TrainConfig
from autorl.training.loss import (
    STD_FLOOR,
    advantages,
    clipped_policy_loss,
    head_logprobs,
    k3_kl,
    loss_normaliser,
    overlong_penalty,
    token_logprobs,
)


def test_advantages_scaled_by_group_batch_or_not_at_all():
    assert advantages([[1.0, 0.0, 1.0, 0.0]]) == [[a / (0.5 + STD_FLOOR) for a in (0.5, -0.5, 0.5, -0.5)]]  # std 0.5
    assert advantages([[1.0, 0.0, 1.0, 0.0]], "none") == [[0.5, -0.5, 0.5, -0.5]]
    assert sum(advantages([[0.2, 0.4, 0.9]])[0]) == pytest.approx(0.0, abs=1e-12)
    # batch: centred per group, divided by the std of all 6 rewards (mean 0.5, std sqrt(0.75 / 6 * 2) ...)
    batch = [[0.0, 1.0], [0.25, 0.25], [0.5, 0.75]]
    std = math.sqrt(sum((r - 0.458333333) ** 2 for g in batch for r in g) / 6) + STD_FLOOR
    got = advantages(batch, "batch")
    assert got[1] is None  # a tie carries no signal under every scale
    assert got[0] == pytest.approx([-0.5 / std, 0.5 / std]) and got[2] == pytest.approx([-0.125 / std, 0.125 / std])
    assert advantages(batch, "group")[2] == pytest.approx([-1.0, 1.0], rel=1e-3)


def test_all_tie_and_single_trajectory_carry_no_signal():
    assert advantages([[0.7, 0.7, 0.7, 0.7], [0.5], []]) == [None, None, None]


def test_scale_rewards_takes_the_old_booleans():
    assert TrainConfig(scale_rewards=True).scale_rewards == "group"
    assert TrainConfig(scale_rewards=False).scale_rewards == "none"


def test_clipped_loss_matches_hand_computation():
    # two sequences, three positions each; the last position of sequence 0 is padding
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.2, -1.0]])
    old = torch.tensor([[-1.5, -2.0, math.nan], [-0.3, -0.9, math.nan]])
    advantages = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss, stats = clipped_policy_loss(logprobs, old, advantages, mask, epsilon=0.2, epsilon_high=0.28)

    # seq 0 (A=+1): ratios e^0.5=1.6487 (clipped to 1.28), 1 -> objective 1.28 + 1
    # seq 1 (A=-2): ratios 1, e^0.7=2.0138, NaN old -> 1 ->
    #   min(1*-2, 1*-2) = -2; min(2.0138*-2, 1.28*-2) = -4.0275; -2
    expected = -(1.28 + 1.0) - (-2.0 - 2 * math.exp(0.7) - 2.0)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert stats["clipped_tokens"] == 1.0  # only seq 0's first token uses the clipped term
    # |logprob - old| over masked tokens with a known old logprob: 0.5, 0, 0, 0.7 (seq 1's NaN is unknown)
    assert stats["sampler_known_tokens"] == 4.0
    assert stats["sampler_gap_sum"] == pytest.approx(1.2, rel=1e-5)


def test_token_logprobs_gathers_next_token():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]]]))
    ids = torch.tensor([[0, 1, 2]])
    assert token_logprobs(logits, ids)[0][0].tolist() == pytest.approx([math.log(0.25), math.log(0.1)], rel=1e-5)


# Shared by the variant tests: two sequences; sequence 0's last position is padding, sequence 1's last
# old logprob is unknown (ratio 1). Log ratios: [0.5, 0, pad] (A = +1) and [-0.5, 0.7, 0] (A = -2).
LOGPROBS = [[-1.0, -2.0, -0.5], [-1.0, -0.2, -1.0]]
OLD = [[-1.5, -2.0, math.nan], [-0.5, -0.9, math.nan]]
ADVANTAGES = [1.0, -2.0]
MASK = [[1, 1, 0], [1, 1, 1]]


def variant_loss(loss: str, epsilon: float, epsilon_high: float, **kwargs):
    logprobs = torch.tensor(LOGPROBS, requires_grad=True)
    total, stats = clipped_policy_loss(
        logprobs,
        torch.tensor(OLD),
        torch.tensor(ADVANTAGES),
        torch.tensor(MASK),
        epsilon,
        epsilon_high,
        loss=loss,
        **kwargs,
    )
    normalised = total / loss_normaliser(loss, [sum(row) for row in MASK])
    normalised.backward()
    return float(normalised.detach()), stats, logprobs.grad


# PPO objective, epsilon 0.2 / 0.28, per token -min(r A, clip(r) A):
#   seq 0: r = e^0.5 = 1.65 > 1.28 with A > 0: clipped high, -1.28; r = 1: -1
#   seq 1: r = e^-0.5 = 0.61 < 0.8 with A < 0: clipped low, min(-1.21, -1.6) = -1.6 -> +1.6;
#          r = e^0.7 = 2.01: min(-4.03, -2.56) -> +2 e^0.7; r = 1: +2
PPO_SUM = -1.28 - 1.0 + 1.6 + 2 * math.exp(0.7) + 2.0


@pytest.mark.parametrize("loss", ["grpo", "dapo"])
def test_grpo_and_dapo_are_the_token_mean_with_the_decoupled_clip(loss):
    value, stats, _ = variant_loss(loss, 0.2, 0.28)
    assert value == pytest.approx(PPO_SUM / 5, rel=1e-6)  # 5 trained tokens
    assert (stats["clipped_low_tokens"], stats["clipped_high_tokens"], stats["clipped_tokens"]) == (1.0, 1.0, 2.0)
    assert stats["ratio_sum"] == pytest.approx(math.exp(0.5) + 1 + math.exp(-0.5) + math.exp(0.7) + 1, rel=1e-6)


def test_dr_grpo_divides_by_sequences_times_the_longest_and_does_not_scale_advantages():
    value, _, _ = variant_loss("dr_grpo", 0.2, 0.28)
    assert value == pytest.approx(PPO_SUM / (2 * 3), rel=1e-6)  # 2 sequences x 3 tokens
    assert loss_normaliser("dr_grpo", [2, 7, 4]) == 21
    assert TrainConfig(loss="dr_grpo").scale_rewards == "none"
    assert TrainConfig(loss="dr_grpo", scale_rewards="batch").scale_rewards == "batch"  # an explicit choice wins
    assert TrainConfig().scale_rewards == "group"


def test_grpo_is_bit_for_bit_the_previous_formula():
    generator = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(4, 9, generator=generator) * 3
    old = logprobs + torch.randn(4, 9, generator=generator) * 0.3
    old[0, 2] = math.nan
    advantages = torch.randn(4, generator=generator)
    mask = (torch.rand(4, 9, generator=generator) > 0.3).long()
    total, stats = clipped_policy_loss(logprobs, old, advantages, mask, 0.2, 0.28)

    # the objective before loss variants existed, verbatim
    known_old = torch.where(torch.isnan(old), logprobs, old)
    ratio = torch.exp(logprobs - known_old)
    unclipped = ratio * advantages.unsqueeze(-1)
    clipped = torch.clamp(ratio, 1 - 0.2, 1 + 0.28) * advantages.unsqueeze(-1)
    previous = (-torch.minimum(unclipped, clipped) * mask.float()).sum()
    assert torch.equal(total, previous)
    assert stats["clipped_tokens"] == float(((clipped < unclipped).float() * mask).sum())
    assert loss_normaliser("grpo", [3, 5]) == 8


def test_gspo_clips_one_ratio_per_sequence_and_averages_sequences():
    config = TrainConfig(loss="gspo")
    assert (config.epsilon, config.epsilon_high) == (3e-4, 4e-4)
    value, stats, grad = variant_loss("gspo", config.epsilon, config.epsilon_high)
    # s0 = e^mean(0.5, 0) = e^0.25 = 1.284 > 1.0004 with A > 0: clipped, -1.0004
    # s1 = e^mean(-0.5, 0.7, 0) = e^(1/15) = 1.069: min(-2.138, -2.0008) = -2.138 -> +2 e^(1/15)
    assert value == pytest.approx((-1.0004 + 2 * math.exp(1 / 15)) / 2, rel=1e-6)  # 2 sequences
    assert (stats["clipped_high_tokens"], stats["clipped_low_tokens"]) == (2.0, 0.0)  # seq 0's two tokens
    assert stats["ratio_sum"] == pytest.approx(2 * math.exp(0.25) + 3 * math.exp(1 / 15), rel=1e-6)
    # the ratio is per sequence: every token of seq 1 gets the same gradient, -A s1 / n1 / 2, whatever
    # its own log ratio; the clipped seq 0 gets none
    expected = 2 * math.exp(1 / 15) / 3 / 2
    assert grad[1].tolist() == pytest.approx([expected] * 3, rel=1e-6)
    assert grad[0].tolist() == [0.0, 0.0, 0.0]
    assert loss_normaliser("gspo", [2, 3]) == 2


def test_cispo_weights_logprobs_by_the_clipped_ratio_without_its_gradient():
    config = TrainConfig(loss="cispo")
    assert (config.epsilon, config.epsilon_high) == (1.0, 5.0)  # the cap is epsilon_high itself, as in TRL
    value, stats, grad = variant_loss("cispo", 1.0, 1.28)
    # weights w = clamp(r, 0, 1.28): seq 0 [1.28, 1], seq 1 [e^-0.5, 1.28, 1]; per token -w A logprob
    weights = [[1.28, 1.0, 0.0], [math.exp(-0.5), 1.28, 1.0]]
    hand = -(1.28 * 1 * -1.0) - (1.0 * 1 * -2.0)
    hand += -(math.exp(-0.5) * -2 * -1.0) - (1.28 * -2 * -0.2) - (1.0 * -2 * -1.0)
    assert value == pytest.approx(hand / 5, rel=1e-6)
    assert (stats["clipped_high_tokens"], stats["clipped_low_tokens"]) == (2.0, 0.0)
    # d/d logprob = -w A / 5: the weight is a constant (stop-gradient), unlike the ratio in PPO
    for row, advantage in enumerate(ADVANTAGES):
        expected = [-w * advantage / 5 * m for w, m in zip(weights[row], MASK[row], strict=False)]
        assert grad[row].tolist() == pytest.approx(expected, rel=1e-6)


def test_k3_kl_on_fixed_numbers_and_zero_for_equal_policies():
    logprobs = torch.tensor([[-1.0, -2.0, -0.3]])
    ref = torch.tensor([[-1.5, -2.0, 0.0]])
    # exp(ref - logp) - (ref - logp) - 1 with ref - logp = -0.5, 0, 0.3
    hand = [math.exp(-0.5) + 0.5 - 1, 0.0, math.exp(0.3) - 0.3 - 1]
    assert k3_kl(logprobs, ref)[0].tolist() == pytest.approx(hand, rel=1e-6)
    assert torch.equal(k3_kl(logprobs, logprobs), torch.zeros_like(logprobs))


def test_kl_penalty_joins_the_token_loss_with_its_normalisation():
    ref = [[-1.5, -2.0, -9.0], [-0.5, -0.9, -1.0]]  # ref - logp: -0.5, 0, (pad); 0.5, -0.7, 0
    k3 = [math.exp(d) - d - 1 for d in (-0.5, 0.0, 0.5, -0.7, 0.0)]
    value, stats, _ = variant_loss("grpo", 0.2, 0.28, ref_logprobs=torch.tensor(ref), kl_beta=0.1)
    assert value == pytest.approx((PPO_SUM + 0.1 * sum(k3)) / 5, rel=1e-6)
    assert stats["kl_sum"] == pytest.approx(sum(k3), rel=1e-6)
    # gspo weights each token 1 / n_i and divides by the sequence count
    value, _, _ = variant_loss("gspo", 3e-4, 4e-4, ref_logprobs=torch.tensor(ref), kl_beta=0.1)
    kl_term = 0.1 * ((k3[0] + k3[1]) / 2 + (k3[2] + k3[3] + k3[4]) / 3) / 2
    assert value == pytest.approx((-1.0004 + 2 * math.exp(1 / 15)) / 2 + kl_term, rel=1e-6)


def test_token_entropy():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30], [0.2, 0.3, 0.5]]]))
    hand = [-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)), 0.0]
    assert token_logprobs(logits, torch.tensor([[0, 1, 2]]))[1][0].tolist() == pytest.approx(hand, abs=1e-6)


@pytest.mark.parametrize("trained_head", [False, True], ids=["frozen head", "trained head"])
def test_head_logprobs_in_chunks_equal_the_whole_logits_and_their_gradients(trained_head):
    """Chunks of 4 positions out of 2 x 7 (one chunk spans both rows, the last is short) against
    `token_logprobs` of the whole [2, 8, 50] logits: values, entropies and gradients, with no gradient too."""
    torch.manual_seed(0)
    head = torch.nn.Linear(6, 50, bias=True, dtype=torch.float64).requires_grad_(trained_head)
    hidden = torch.randn(2, 8, 6, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 50, (2, 8))
    weights = torch.randn(2, 7, dtype=torch.float64)  # a loss that weighs each position differently

    def gradients(logprobs: torch.Tensor) -> list[torch.Tensor]:
        wrt = [hidden, *head.parameters()] if trained_head else [hidden]
        return torch.autograd.grad((logprobs * weights).sum(), wrt)

    plain, plain_entropy = token_logprobs(head(hidden), ids)
    chunked, entropy = head_logprobs(hidden[:, :-1], head, ids[:, 1:], chunk_tokens=4)
    torch.testing.assert_close(chunked, plain)
    torch.testing.assert_close(entropy, plain_entropy)
    assert not entropy.requires_grad
    for got, expected in zip(gradients(chunked), gradients(plain), strict=True):
        torch.testing.assert_close(got, expected)
    with torch.no_grad():
        torch.testing.assert_close(head_logprobs(hidden[:, :-1], head, ids[:, 1:], 4, with_entropy=False)[0], plain)


def test_head_logprobs_in_bf16_stay_within_bf16_rounding_of_float32():
    torch.manual_seed(1)
    head = torch.nn.Linear(16, 300, bias=False).requires_grad_(False)
    hidden = torch.randn(3, 9, 16, requires_grad=True)
    ids = torch.randint(0, 300, (3, 9))
    exact, _ = head_logprobs(hidden, head, ids, chunk_tokens=5)
    (grad,) = torch.autograd.grad(exact.sum(), hidden)
    low = hidden.detach().bfloat16().requires_grad_()
    rounded, _ = head_logprobs(low, head.bfloat16(), ids, chunk_tokens=5)
    (low_grad,) = torch.autograd.grad(rounded.sum(), low)
    assert rounded.dtype == torch.float32 and low_grad.dtype == torch.bfloat16
    torch.testing.assert_close(rounded, exact, rtol=0.02, atol=0.05)
    torch.testing.assert_close(low_grad.float(), grad, rtol=0.02, atol=0.05)


@pytest.mark.parametrize(
    "length, penalty",
    [(0, 0.0), (96, 0.0), (97, -1 / 32), (112, -0.5), (128, -1.0), (140, -1.0)],
)
def test_overlong_penalty_falls_linearly_over_the_buffer(length, penalty):
    assert overlong_penalty(length, max_tokens=128, buffer=32) == pytest.approx(penalty)
    assert overlong_penalty(length, max_tokens=128, buffer=0) == 0.0  # off
