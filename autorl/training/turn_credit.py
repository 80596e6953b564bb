"""Credit per turn: each assistant turn of a trajectory trained with its own advantage (GiGPO-style).

A judge that scores turns (`ruler.TurnScores`, a program judge's list of numbers) leaves a reward per assistant
message in the trajectory's `metadata["turn_rewards"]` (`TURN_REWARDS`; a rollout may set it itself). Where a
group's trajectories carry them, a turn's advantage is

    A(turn) = A_episode(trajectory) + turn_advantage_weight x A_step(turn)

(GiGPO, arXiv 2505.10978, Eq. 8): A_episode is the trajectory's group-relative advantage as without turn rewards
(`loss.advantages`); A_step compares the turn's discounted return, G_t = r_t + gamma r_t+1 + ..., gamma
`TrainConfig.turn_reward_discount`, with the returns of the turns of the group taken from the same state: the same
conversation before the turn (GiGPO's anchor states, `turn_advantage_grouping` "state"), the same turn number
("turn", per-turn group normalisation), or the same state where another rollout of the group reached it and else
the same turn number among the turns whose state no other rollout reached ("auto"). A_step is the return minus its
step group's mean, divided by the group's population std plus `STD_FLOOR` unless `scale_rewards` is "none"; a step
group of one turn, or whose returns tie (within `tie_spread`), gives 0. Every token of a turn gets its turn's
advantage (`Sequence.turns`); a trajectory's additional histories get its episode advantage. A group without turn
rewards, or `turn_advantage_weight` 0, trains as before.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Hashable

import torch

from ruler.scores import TURN_REWARDS

from ..config import TrainConfig
from ..errors import AutoRLError
from ..trajectories import Trajectory, TrajectoryGroup, message_key
from .loss import STD_FLOOR, tied
from .sequences import Sequence

__all__ = ["TURN_REWARDS", "credit_turns", "micro_batch_advantages", "step_advantages", "turn_returns"]


def turn_rewards(trajectory: Trajectory) -> list[float] | None:
    """The trajectory's reward per assistant message (`metadata["turn_rewards"]`), None where it has none; an
    `AutoRLError` naming the problem where they are not one finite number per assistant message."""
    rewards = trajectory.metadata.get(TURN_REWARDS)
    if rewards is None:
        return None
    turns = sum(m.get("role") == "assistant" for m in trajectory.messages())
    if not isinstance(rewards, list | tuple) or len(rewards) != turns:
        raise AutoRLError(
            f"metadata[{TURN_REWARDS!r}] must be a list of one reward per assistant message ({turns}), got {rewards!r:.80}"
        )
    if not all(isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) for r in rewards):
        raise AutoRLError(f"metadata[{TURN_REWARDS!r}] holds a reward that is not a finite number: {rewards!r:.80}")
    return [float(r) for r in rewards]


def turn_returns(rewards: list[float], discount: float) -> list[float]:
    """Each turn's discounted return: its reward plus `discount` times the next turn's return."""
    returns, running = [0.0] * len(rewards), 0.0
    for index in reversed(range(len(rewards))):
        running = rewards[index] + discount * running
        returns[index] = running
    return returns


def turn_states(trajectory: Trajectory) -> list[Hashable]:
    """What each assistant message was answered from: the tools and every message before it (`message_key`s)."""
    messages = trajectory.messages()
    tools = repr(trajectory.tools)
    keys = [message_key(m) for m in messages]
    return [(tools, tuple(keys[:index])) for index, m in enumerate(messages) if m.get("role") == "assistant"]


def step_groups(states: list[list[Hashable]], grouping: str) -> list[list[Hashable]]:
    """The step group of each turn of each trajectory (its anchor): by state, by turn number, or "auto" (by state
    where two or more turns of the group share it, else by turn number among the turns whose state is their own)."""
    if grouping == "turn":
        return [[("turn", t) for t in range(len(own))] for own in states]
    counts = defaultdict(int)
    for own in states:
        for state in own:
            counts[state] += 1
    return [
        [("state", s) if grouping == "state" or counts[s] > 1 else ("turn", t) for t, s in enumerate(own)]
        for own in states
    ]


def step_advantages(
    returns: list[list[float]], anchors: list[list[Hashable]], scale: bool = True, spread: float = 0.0
) -> list[list[float]]:
    """A_step of each turn: its return minus the mean of its step group's (the turns with its anchor), divided by
    their population std plus `STD_FLOOR` with `scale`; 0 for a turn alone in its step group or in one that ties."""
    members: defaultdict[Hashable, list[float]] = defaultdict(list)
    for own_returns, own_anchors in zip(returns, anchors, strict=True):
        for value, anchor in zip(own_returns, own_anchors, strict=True):
            members[anchor].append(value)
    result = []
    for own_returns, own_anchors in zip(returns, anchors, strict=True):
        row = []
        for value, anchor in zip(own_returns, own_anchors, strict=True):
            group = members[anchor]
            if tied(group, spread):
                row.append(0.0)
                continue
            std = statistics.pstdev(group) + STD_FLOOR if scale else 1.0
            row.append((value - statistics.fmean(group)) / std)
        result.append(row)
    return result


def credit_turns(
    group: TrajectoryGroup,
    sequences: list[list[Sequence]],
    episode: list[float] | None,
    config: TrainConfig,
) -> list[float] | None:
    """The group's advantages with credit per turn: where its trajectories carry turn rewards (and
    `turn_advantage_weight` > 0), each of their `sequences` (a trajectory's conversation, then its additional
    histories) gets its tokens' advantages (`Sequence.advantages`), and the returned list holds one number per
    trajectory that is 0 exactly where all its tokens' are (the trainer's test for a sequence with signal): the
    mean over its conversation's trained tokens, else the largest in size. `episode` (None: the group's rewards
    tie) is returned as it is for a group without turn rewards; None where no turn has an advantage."""
    rewards = [turn_rewards(t) for t in group.trajectories]
    if config.turn_advantage_weight == 0 or all(r is None for r in rewards):
        return episode
    base = episode if episode is not None else [0.0] * len(rewards)
    credited = [(i, r) for i, r in enumerate(rewards) if r is not None]
    returns = [turn_returns(r, config.turn_reward_discount) for _, r in credited]
    anchors = step_groups([turn_states(group.trajectories[i]) for i, _ in credited], config.turn_advantage_grouping)
    steps = step_advantages(returns, anchors, config.scale_rewards != "none", config.tie_spread)
    per_turn: dict[int, list[float]] = {
        i: [base[i] + config.turn_advantage_weight * s for s in own]
        for (i, _), own in zip(credited, steps, strict=True)
    }
    summaries = []
    for index, own in enumerate(sequences):
        turns = per_turn.get(index)
        for position, sequence in enumerate(own):
            if turns is None or position > 0:  # a trajectory without turn rewards, or an additional history
                sequence.advantages = [base[index] if m else 0.0 for m in sequence.mask]
            else:
                sequence.advantages = [
                    turns[t] if m and t >= 0 else 0.0 for t, m in zip(sequence.turns, sequence.mask, strict=True)
                ]
        summaries.append(_summary(own[0].advantages, own[0].mask) if own else base[index])
    return summaries if any(summaries) else None


def _summary(advantages: list[float], mask: list[int]) -> float:
    trained = [a for a, m in zip(advantages, mask, strict=True) if m]
    mean = statistics.fmean(trained) if trained else 0.0
    return mean if mean != 0 or not trained else max(trained, key=abs)


def micro_batch_advantages(micro: list[tuple[Sequence, float]], width: int, device: torch.device) -> torch.Tensor:
    """The advantages of a micro-batch of (sequence, advantage) right-padded to `width` tokens: [batch] as before
    where no sequence carries per-token advantages, else [batch, width - 1] aligned with the shifted mask (a row
    without them holds its advantage at every position)."""
    if all(s.advantages is None for s, _ in micro):
        return torch.tensor([a for _, a in micro], device=device)
    rows = []
    for sequence, advantage in micro:
        values = (
            sequence.advantages[1:] if sequence.advantages is not None else [advantage] * (len(sequence.input_ids) - 1)
        )
        rows.append(values + [0.0] * (width - 1 - len(values)))
    return torch.tensor(rows, device=device)
