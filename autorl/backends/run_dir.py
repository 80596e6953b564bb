"""A trained model's run directory, as every backend lays it out: `checkpoints/NNNN/` (PEFT LoRA and its
metrics), `history.jsonl` (one line per training step), `log_history.jsonl` (one line per `Model.log`),
`trajectories/` (parquet) and `logs/`."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..atomic import atomic_file, atomic_text, private_dir
from ..errors import AutoRLError
from ..training.checkpoints import METRICS_FILE, complete_checkpoints, latest_checkpoint
from ..trajectories import TrajectoryGroup, scores_frame

log = logging.getLogger("autorl")
HISTORY_FILE = "history.jsonl"
"""One record per training step: `{"step": N, **the step's metrics}`, steps 1 to the newest checkpoint."""
LOG_HISTORY_FILE = "log_history.jsonl"
"""One record per `Model.log` call: `{"step", "split", "<split>/<metric>": value, ..., "recorded_at"}`."""


def ensure_writable(run_dir: Path) -> None:
    """Create `run_dir` (and its missing parents) private to the user (`autorl.atomic.private_dir`: it holds a
    task's data) and prove it takes files; one clear error line if it does not."""
    try:
        private_dir(run_dir)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise AutoRLError(f"run directory {run_dir} is not writable ({exc.strerror}); choose another --home") from None


def warn_untrained(step: int, groups: list[TrajectoryGroup], metrics: dict) -> None:
    """Log why step `step` left the LoRA unchanged, if it did."""
    if not groups:
        log.warning("step %d: no trajectory groups to train on; the LoRA is unchanged", step)
    elif metrics["groups_trained"] == 0:
        log.warning(
            "step %d: no training signal (%d of %d groups had tied rewards); the LoRA is unchanged",
            step,
            metrics["groups_skipped_tied"],
            metrics["groups"],
        )


def append_history(run_dir: Path, record: dict, name: str = HISTORY_FILE) -> None:
    """Append `record` to the history file `name` (synced: a step's line survives a crash after it)."""
    with open(run_dir / name, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_history(run_dir: Path, records: list[dict], name: str = HISTORY_FILE) -> None:
    """Replace history file `name` with `records`, one JSON line each, atomically."""
    atomic_text(run_dir / name, "".join(json.dumps(record) + "\n" for record in records))


def read_history(run_dir: Path, name: str = HISTORY_FILE) -> list[dict]:
    """The records of a history file, in the order written: `history.jsonl` holds one per training step, in
    step order (a torn last line from a crash is ignored)."""
    path = run_dir / name
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def reconcile_history(run_dir: Path) -> None:
    """Make history.jsonl hold exactly one record per step up to the newest complete checkpoint, in order.

    A crash between a checkpoint's rename and its history line (or mid-line) leaves them out of step; each
    checkpoint carries its own metrics, so a step's record is taken from its checkpoint where it has one,
    else from the history (the checkpoints that `delete_checkpoints` removed). A step without either stays out.
    """
    checkpoints = run_dir / "checkpoints"
    latest = latest_checkpoint(checkpoints)
    records = read_history(run_dir)
    if latest is None or [r.get("step") for r in records] == list(range(1, latest[0] + 1)):
        return
    by_step = {r["step"]: r for r in records if isinstance(r.get("step"), int) and 0 < r["step"] <= latest[0]}
    for step, path in complete_checkpoints(checkpoints):
        by_step[step] = json.loads((path / METRICS_FILE).read_text())
    log.warning(
        "history.jsonl disagreed with the checkpoints (a crash between them); rebuilt for steps 1-%d", latest[0]
    )
    write_history(run_dir, [by_step[s] for s in sorted(by_step)])


def save_trajectories(path: Path, groups: list[TrajectoryGroup], step: int) -> None:
    """Write the groups' trajectories to the parquet file `path` (a row per trajectory: input, variant,
    reward, answer, the judge's explanation, `step`), atomically."""
    frame = scores_frame(groups).assign(step=step)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_file(path, lambda tmp: frame.to_parquet(tmp, index=False))
