"""A trained model's run directory, as every backend lays it out: `checkpoints/NNNN/` (PEFT LoRA and its
metrics), `history.jsonl` (one line per step) and `logs/`."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..atomic import atomic_text, private_dir
from ..errors import AutoRLError
from ..training.checkpoints import METRICS_FILE, checkpoint_name, latest_checkpoint
from ..trajectories import TrajectoryGroup

log = logging.getLogger("autorl")
HISTORY_FILE = "history.jsonl"


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


def append_history(run_dir: Path, record: dict) -> None:
    with open(run_dir / HISTORY_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_history(run_dir: Path) -> list[dict]:
    """The per-step records of a run, in step order (a torn last line from a crash is ignored)."""
    path = run_dir / HISTORY_FILE
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
    """Make history.jsonl hold exactly one record per complete checkpoint, in order.

    A crash between a checkpoint's rename and its history line (or mid-line) leaves them out of step;
    each checkpoint carries its own metrics, so the history is rebuilt from them.
    """
    checkpoints = run_dir / "checkpoints"
    latest = latest_checkpoint(checkpoints)
    steps = [r.get("step") for r in read_history(run_dir)]
    if latest is None or steps == list(range(1, latest[0] + 1)):
        return
    records = [
        json.loads((checkpoints / checkpoint_name(s) / METRICS_FILE).read_text())
        for s in range(1, latest[0] + 1)
        if (checkpoints / checkpoint_name(s) / METRICS_FILE).is_file()
    ]
    atomic_text(run_dir / HISTORY_FILE, "".join(json.dumps(r) + "\n" for r in records))
