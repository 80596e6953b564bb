"""Credit per turn: a judge's turn scores reach the trajectory, each turn's tokens get their own advantage
(GiGPO-style: episode advantage + weight x step advantage among turns from the same state), checked against hand
computations, and a trainer step on a scripted two-turn group uses them."""

import asyncio
import math

import pytest
import torch

import ruler
from autorl import TrainConfig, TrainerConfig, Trajectory, TrajectoryGroup
from autorl.errors import AutoRLError
from autorl.training.loss import STD_FLOOR, policy_terms
from autorl.training.sequences import Sequence, tokenize_trajectory
from autorl.training.trainer import GRPOTrainer
from autorl.training.turn_credit import (
    TURN_REWARDS,
    credit_turns,
    micro_batch_advantages,
    step_advantages,
    turn_returns,
)
from tests.helpers.tiny import choice

GAMMA = 0.5


def two_turns(first: str, observation: str, answer: str, turns: list[float] | None, reward: float) -> Trajectory:
    """A scripted rollout: the question, a first reply, what it saw, a second reply."""
    metadata = {TURN_REWARDS: turns} if turns is not None else {}
    items = [{"role": "user", "content": "q"}, choice(first), {"role": "user", "content": observation}, choice(answer)]
    return Trajectory(messages_and_choices=items, reward=reward, metadata=metadata)


def scripted_group(with_turns: bool = True) -> TrajectoryGroup:
    """Three two-turn rollouts: the first two search the same way (so their second turns share a state) and
    differ in their answers; the third searches otherwise and finds nothing."""
    return TrajectoryGroup(
        [
            two_turns("search x", "found", "answer 7", [0.5, 1.0] if with_turns else None, 1.0),
            two_turns("search x", "found", "answer 3", [0.5, 0.0] if with_turns else None, 0.0),
            two_turns("search y", "nothing", "answer 3", [0.0, 0.0] if with_turns else None, 0.0),
        ]
    )


def z(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) + STD_FLOOR
    return [(v - mean) / std for v in values]


# by hand: returns (gamma 0.5) T1 [1.0, 1.0], T2 [0.5, 0.0], T3 [0.0, 0.0]; rewards [1, 0, 0]
EPISODE = z([1.0, 0.0, 0.0])
FIRST = z([1.0, 0.5, 0.0])  # every first turn answers the same question: one step group
SECOND_BY_STATE = [*z([1.0, 0.0]), 0.0]  # T1 and T2 saw the same; T3's state is its own
SECOND_BY_TURN = z([1.0, 0.0, 0.0])


def test_turn_returns_are_discounted_sums_of_the_later_turns_rewards():
    assert turn_returns([0.25, 0.25, 1.0], 0.5) == [0.25 + 0.5 * 0.25 + 0.25 * 1.0, 0.25 + 0.5, 1.0]
    assert turn_returns([1.0, 2.0], 1.0) == [3.0, 2.0] and turn_returns([], 0.9) == []


def test_step_advantages_compare_returns_within_each_anchor_and_leave_a_lone_turn_at_zero():
    returns = [[1.0, 1.0], [0.5, 0.0], [0.0, 0.0]]
    anchors = [["a", "b"], ["a", "b"], ["a", "c"]]
    got = step_advantages(returns, anchors)
    assert [row[0] for row in got] == pytest.approx(FIRST)
    assert [row[1] for row in got] == pytest.approx(SECOND_BY_STATE)
    unscaled = step_advantages(returns, anchors, scale=False)
    assert [row[0] for row in unscaled] == pytest.approx([0.5, 0.0, -0.5])
    assert step_advantages([[1.0], [1.0]], [["a"], ["a"]]) == [[0.0], [0.0]]  # a tie teaches nothing


@pytest.mark.parametrize(
    ("grouping", "second"), [("state", SECOND_BY_STATE), ("auto", SECOND_BY_STATE), ("turn", SECOND_BY_TURN)]
)
def test_each_turns_tokens_get_the_episode_advantage_plus_the_weighted_step_advantage(tokenizer, grouping, second):
    group = scripted_group()
    config = TrainConfig(turn_reward_discount=GAMMA, turn_advantage_weight=0.5, turn_advantage_grouping=grouping)
    sequences = [[tokenize_trajectory(t, tokenizer)] for t in group.trajectories]
    summaries = credit_turns(group, sequences, EPISODE, config)
    for index, (sequence,) in enumerate(sequences):
        expected = [EPISODE[index] + 0.5 * FIRST[index], EPISODE[index] + 0.5 * second[index]]
        trained = {(t, a) for t, m, a in zip(sequence.turns, sequence.mask, sequence.advantages, strict=True) if m}
        assert {t for t, _ in trained} == {0, 1}
        by_turn = {t: a for t, a in trained}
        assert [by_turn[t] for t in sorted(by_turn)] == pytest.approx(expected)
        assert all(a == 0 for a, m in zip(sequence.advantages, sequence.mask, strict=True) if not m)  # context
        counts = [sum(1 for t, m in zip(sequence.turns, sequence.mask, strict=True) if m and t == k) for k in (0, 1)]
        assert summaries[index] == pytest.approx((counts[0] * expected[0] + counts[1] * expected[1]) / sum(counts))


def test_turn_indices_count_assistant_messages(tokenizer):
    sequence = tokenize_trajectory(scripted_group().trajectories[0], tokenizer)
    assert sorted({t for t, m in zip(sequence.turns, sequence.mask, strict=True) if m}) == [0, 1]
    assert all(t == -1 for t, m in zip(sequence.turns, sequence.mask, strict=True) if not m)


def test_a_group_without_turn_rewards_or_at_weight_zero_keeps_its_trajectory_advantages(tokenizer):
    for group, config in (
        (scripted_group(with_turns=False), TrainConfig()),
        (scripted_group(), TrainConfig(turn_advantage_weight=0)),
    ):
        sequences = [[tokenize_trajectory(t, tokenizer)] for t in group.trajectories]
        assert credit_turns(group, sequences, EPISODE, config) is EPISODE
        assert all(own[0].advantages is None for own in sequences)


def test_turn_rewards_of_the_wrong_length_are_an_error_naming_them(tokenizer):
    group = TrajectoryGroup([two_turns("a", "b", "c", [1.0], 1.0), two_turns("a", "b", "d", [0.0, 1.0], 0.0)])
    sequences = [[tokenize_trajectory(t, tokenizer)] for t in group.trajectories]
    with pytest.raises(AutoRLError, match="one reward per assistant message"):
        credit_turns(group, sequences, [1.0, -1.0], TrainConfig())


def test_micro_batch_advantages_align_per_token_values_with_the_shifted_mask():
    plain = Sequence([1, 2, 3], [0, 1, 1], [math.nan] * 3)
    per_token = Sequence([1, 2, 3, 4], [0, 1, 0, 1], [math.nan] * 4, advantages=[0.0, 2.0, 0.0, -1.0])
    assert micro_batch_advantages([(plain, 0.5)], 3, torch.device("cpu")).tolist() == [0.5]
    got = micro_batch_advantages([(plain, 0.5), (per_token, 0.25)], 4, torch.device("cpu"))
    assert got.tolist() == [[0.5, 0.5, 0.0], [2.0, 0.0, -1.0]]


def test_the_loss_takes_each_tokens_own_advantage():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    advantages = torch.tensor([[2.0, -1.0, 5.0]])
    per_token, weight, _ = policy_terms(logprobs, logprobs.detach(), advantages, mask, 0.2, 0.28)
    assert (per_token * weight).tolist() == [[-2.0, 1.0, 0.0]]  # ratio 1: -A per trained token
    (per_token * weight).sum().backward()
    assert logprobs.grad.tolist() == [[-2.0, 1.0, 0.0]]
    scalar, _, _ = policy_terms(logprobs, logprobs.detach(), torch.tensor([3.0]), mask, 0.2, 0.28)
    constant, _, _ = policy_terms(logprobs, logprobs.detach(), torch.full((1, 3), 3.0), mask, 0.2, 0.28)
    assert torch.equal(scalar, constant)


def test_a_function_judge_scores_turns_into_the_trajectorys_metadata():
    def judge(messages):
        return [0.5 if "x" in m["content"] else 0.0 for m in messages if m["role"] == "assistant"]

    scored = asyncio.run(ruler.ruler_score_group(scripted_group(with_turns=False), ruler.FunctionJudge(judge)))
    assert [t.metadata[TURN_REWARDS] for t in scored.trajectories] == [[0.5, 0.0], [0.5, 0.0], [0.0, 0.0]]
    assert [t.reward for t in scored.trajectories] == [0.5, 0.5, 0.0]  # a list's sum
    explicit = ruler.FunctionJudge(lambda m: ruler.TurnScores(1.0, [0.25, 0.75]))
    scored = asyncio.run(ruler.ruler_score_group(scripted_group(with_turns=False), explicit))
    assert scored.trajectories[0].reward == 1.0 and scored.trajectories[0].metadata[TURN_REWARDS] == [0.25, 0.75]
    with pytest.raises(ruler.JudgeFailedError, match="1 turn scores for 2 assistant messages"):
        asyncio.run(ruler.ruler_score_group(scripted_group(), ruler.FunctionJudge(lambda m: [1.0])))
    combined = ruler.CombinedJudge([ruler.FunctionJudge(judge), ruler.FunctionJudge(lambda m: 1.0)], [0.5, 0.5])
    scores = asyncio.run(combined.score_group([scripted_group().trajectories[0].messages()]))
    assert scores[0].turn_scores == [0.25, 0.0] and scores[0].score == 0.75


def test_a_trainer_step_on_a_scripted_two_turn_group_trains_each_turn_on_its_own_advantage(tiny_model, tmp_path):
    """With unknown old logprobs the ratio is 1, so grpo's loss is minus the mean advantage of the trained
    tokens: the hand computation of each configuration, on the same group."""
    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", TrainerConfig(seed=0))
    sequences = [tokenize_trajectory(t, trainer.tokenizer) for t in scripted_group().trajectories]
    counts = [[sum(1 for t, m in zip(s.turns, s.mask, strict=True) if m and t == k) for k in (0, 1)] for s in sequences]

    def expected_loss(first: list[float], second: list[float]) -> float:
        total = sum(c[0] * a + c[1] * b for c, a, b in zip(counts, first, second, strict=True))
        return -total / sum(map(sum, counts))

    config = TrainConfig(turn_reward_discount=GAMMA, turn_advantage_weight=0.5)
    metrics = trainer.step([scripted_group()], config)
    assert metrics["groups_trained"] == 1 and metrics["trained_tokens"] == sum(map(sum, counts))
    credited = expected_loss(
        [e + 0.5 * f for e, f in zip(EPISODE, FIRST, strict=True)],
        [e + 0.5 * s for e, s in zip(EPISODE, SECOND_BY_STATE, strict=True)],
    )
    assert metrics["loss"] == pytest.approx(credited, abs=1e-5)
    for group, config in (
        (scripted_group(with_turns=False), TrainConfig()),
        (scripted_group(), TrainConfig(turn_advantage_weight=0)),
    ):
        assert trainer.step([group], config)["loss"] == pytest.approx(expected_loss(EPISODE, EPISODE), abs=1e-5)
    # trajectory rewards that tie teach nothing by themselves; their turns still differ
    tied_rewards = TrajectoryGroup(
        [two_turns("search x", "found", "a", [1.0, 0.0], 1.0), two_turns("search z", "no", "a", [0.0, 1.0], 1.0)]
    )
    assert trainer.step([tied_rewards], TrainConfig(turn_advantage_weight=0))["groups_skipped_tied"] == 1
    assert trainer.step([tied_rewards], TrainConfig())["groups_trained"] == 1
