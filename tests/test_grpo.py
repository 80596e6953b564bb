"""Group-relative advantages and the clipped GRPO loss, against hand-computed values."""

import math

import pytest
import torch

from autorl.grpo import clipped_policy_loss, group_advantages, token_logprobs


def test_advantages_scaled_and_unscaled():
    assert group_advantages([1.0, 0.0, 1.0, 0.0]) == [1.0, -1.0, 1.0, -1.0]
    assert group_advantages([1.0, 0.0, 1.0, 0.0], scale=False) == [0.5, -0.5, 0.5, -0.5]
    adv = group_advantages([0.2, 0.4, 0.9])
    assert sum(adv) == pytest.approx(0.0, abs=1e-12)


def test_all_tie_and_single_trajectory_carry_no_signal():
    assert group_advantages([0.7, 0.7, 0.7, 0.7]) is None
    assert group_advantages([0.5]) is None
    assert group_advantages([]) is None


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
    assert token_logprobs(logits, ids)[0].tolist() == pytest.approx([math.log(0.25), math.log(0.1)], rel=1e-5)
