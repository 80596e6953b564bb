"""Answer validation inputs, judge each input's answers as one group, and save and summarise the scores."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

import pandas as pd

from autorl import gather_trajectory_groups
from autorl.trajectories import Trajectory, TrajectoryGroup

from .stats import mean_ci

GROUPS_FILE = "groups.jsonl"
SCORES_FILE = "scores.parquet"


async def judged_groups(
    ctx, items: list[list[Trajectory | Awaitable[Trajectory]]], desc: str
) -> list[TrajectoryGroup]:
    """One judged group per validation input; each trajectory's `metadata["variant"]` names its source."""
    groups = [TrajectoryGroup(answers) for answers in items]
    return await gather_trajectory_groups(groups, pbar_desc=desc, max_exceptions=0.25, after_each=ctx.score)


def answers(ctx, prompt: str, text: str, name: str, variant: str) -> list[Awaitable[Trajectory]]:
    """`eval_samples` answers of the policy served as `name` to `text`, each tagged with `variant`."""
    return [_tagged(ctx.policy.answer(prompt, text, ctx.config, name), variant) for _ in range(ctx.config.eval_samples)]


async def _tagged(answer: Awaitable[Trajectory], variant: str) -> Trajectory:
    trajectory = await answer
    trajectory.metadata["variant"] = variant
    return trajectory


def scores_frame(groups: list[TrajectoryGroup]) -> pd.DataFrame:
    rows = [
        {
            "input": t.metadata.get("input", ""),
            "variant": t.metadata.get("variant", ""),
            "reward": t.reward,
            "answer": t.messages()[-1].get("content", ""),
            "explanation": t.logs[-1] if t.logs else "",
        }
        for g in groups
        for t in g.trajectories
    ]
    return pd.DataFrame(rows, columns=["input", "variant", "reward", "answer", "explanation"])


def save(out: Path, groups: list[TrajectoryGroup]) -> pd.DataFrame:
    (out / GROUPS_FILE).write_text("".join(g.model_dump_json() + "\n" for g in groups))
    frame = scores_frame(groups)
    frame.to_parquet(out / SCORES_FILE, index=False)
    return frame


def load_groups(directory: Path) -> list[TrajectoryGroup]:
    return [TrajectoryGroup.model_validate_json(line) for line in (directory / GROUPS_FILE).read_text().splitlines()]


def summarize(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per variant: mean reward over inputs (each input's answers averaged first) and its 95% CI."""
    summary = {}
    for variant, rows in frame.groupby("variant"):
        per_input = rows.groupby("input")["reward"].mean().tolist()
        mean, low, high = mean_ci(per_input)
        summary[str(variant)] = {"mean": mean, "ci_low": low, "ci_high": high, "inputs": len(per_input)}
    return summary
