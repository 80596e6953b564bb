"""The train stage's artifact, the training directory: its checkpoints and history (`steps_done`, `last_step`,
`best_step`, `history_frame`), the sentinel's actions recorded there (`SENTINEL_ACTIONS`, the steps a rollback
dropped under `ROLLED_BACK`) and the checkpoints validated during training (`VAL_METRIC`)."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from autorl.backends.retention import best_step as best_by
from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history
from autorl.training.checkpoints import complete_checkpoints, latest_checkpoint

from ..artifacts import MANIFEST
from . import sft
from .run import RunArtifacts

if TYPE_CHECKING:  # for annotations only
    from ..config import RunConfig

NAME = "train"


def steps_done(ctx: RunArtifacts) -> int:
    """The newest checkpoint's step (0 before the first)."""
    latest = latest_checkpoint(ctx.policy.run_dir / "checkpoints")
    return latest[0] if latest else 0


def last_step(ctx: RunArtifacts) -> int:
    """The model step training ends at: the SFT warm-up's steps (`sft.first_rl_step`), then `steps` RL steps."""
    return sft.first_rl_step(ctx) - 1 + ctx.config.steps


def best_step(ctx: RunArtifacts, last: int | None = None, among: Collection[int] | None = None) -> int | None:
    """The best of the checkpoints `among` (default: those in the training directory), up to step `last`
    (default `last_step`): the validated one with the highest validation reward (its latest record), else,
    without validation, the one with the highest mean training reward; ties go to the later step; None before an
    RL step. A checkpoint `--keep-checkpoints` deleted is no candidate (what `RUN@best` names must exist, as
    retention's `best_checkpoint` keeps to the existing ones)."""
    work, last = ctx.policy.run_dir, last or last_step(ctx)
    if among is None:
        among = [step for step, _ in complete_checkpoints(work / "checkpoints")]
    kept = {step for step in among if step <= last}
    if ctx.config.validate_every:
        logged = {r["step"]: r for r in read_history(work, LOG_HISTORY_FILE) if r.get("step") in kept}
        if (best := best_by(list(logged.values()), VAL_METRIC)) is not None:
            return best
    return best_by([r for r in read_history(work) if r.get("step") in kept], "reward")


def history_frame(ctx: RunArtifacts) -> pd.DataFrame:
    """The RL steps' history up to `last_step`, one row per step (the SFT warm-up's steps left out)."""
    return pd.DataFrame(rl_history(read_history(ctx.policy.run_dir)[: last_step(ctx)]))


def rl_history(history: list[dict]) -> list[dict]:
    """The RL steps' records of a training history (an SFT step's record has `sft`)."""
    return [record for record in history if not record.get("sft")]


SENTINEL_ACTIONS = "sentinel.jsonl"
"""The sentinel's actions in the training directory, one JSON record each: `step` (where it fired), `action`
(warn, stop, rollback), `warning`; a rollback's `restored` checkpoint, the history records of the steps it
dropped (`dropped`: their figures, kept here) and the `kl_beta` and `learning_rate` it set."""

ROLLED_BACK = "rolled_back"
"""Where a rollback moves the dropped steps' groups and trajectories: `rolled_back/<n>/`, n the rollback's number."""


def sentinel_actions(run_dir: Path) -> list[dict[str, Any]]:
    """The sentinel's actions so far (`SENTINEL_ACTIONS`), in order."""
    return read_history(run_dir, SENTINEL_ACTIONS)


def dropped_step_dirs(run_dir: Path, step: int) -> list[Path]:
    """The step directories that rollbacks moved aside (`ROLLED_BACK`) on the way to checkpoint `step`: those
    of each rollback that restored a checkpoint before `step`. Their cost was spent making it."""
    rollbacks = [a for a in sentinel_actions(run_dir) if a["action"] == "rollback"]
    return [
        path
        for number, action in enumerate(rollbacks, start=1)
        if action["restored"] < step
        for path in sorted((run_dir / ROLLED_BACK / str(number) / "steps").glob("[0-9]*"))
    ]


VAL_METRIC = "val/reward"
"""What the best checkpoint is best by when training validates (`delete_checkpoints`' name for it)."""


def stops_by_curve(config: RunConfig) -> bool:
    """Whether training may stop before `steps` when validation stops improving (`patience`): it validates, and
    `steps` was not given (a given number is a fixed budget)."""
    return config.patience > 0 and config.validate_every > 0 and "steps" not in config.model_fields_set


def flattened(run_dir: Path, patience: int) -> int | None:
    """The best validated step, where none of the last `patience` validations beat it (the held-out curve has
    flattened); None while one did, or with `patience` validations or fewer. Each step's latest record counts."""
    logged = {r["step"]: r[VAL_METRIC] for r in read_history(run_dir, LOG_HISTORY_FILE) if VAL_METRIC in r}
    steps = sorted(logged)
    if patience <= 0 or len(steps) <= patience:
        return None
    best = max(steps[:-patience], key=lambda step: (logged[step], step))
    return best if all(logged[step] <= logged[best] for step in steps[-patience:]) else None


def stopped_by_curve(run_dir: Path) -> bool:
    """Whether the finished training stopped before its last step because validation stopped improving."""
    path = run_dir / MANIFEST
    return path.is_file() and "stopped_by_curve" in json.loads(path.read_text())


def validated_steps(run_dir: Path) -> list[int]:
    """The steps validated during training (their `val/reward` records), in order."""
    return [r["step"] for r in read_history(run_dir, LOG_HISTORY_FILE) if VAL_METRIC in r]
