"""Judged answers to the validation inputs as the baseline and evaluate stages write them: the groups, one per
input (`GROUPS_FILE`), and their scores (`SCORES_FILE`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from autorl.trajectories import TrajectoryGroup, scores_frame

GROUPS_FILE = "groups.jsonl"
SCORES_FILE = "scores.parquet"


def save(out: Path, groups: list[TrajectoryGroup]) -> pd.DataFrame:
    (out / GROUPS_FILE).write_text("".join(g.model_dump_json() + "\n" for g in groups))
    frame = scores_frame(groups)
    frame.to_parquet(out / SCORES_FILE, index=False)
    return frame


def load_groups(directory: Path) -> list[TrajectoryGroup]:
    return [TrajectoryGroup.model_validate_json(line) for line in (directory / GROUPS_FILE).read_text().splitlines()]
