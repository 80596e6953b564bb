"""The checkpoint layout of a run directory: `checkpoints/NNNN/` holds a PEFT LoRA and its metrics."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import AutoRLError

METRICS_FILE = "metrics.json"


def checkpoint_name(step: int) -> str:
    return f"{step:04d}"


def complete_checkpoints(checkpoints: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints (adapter and metrics written) under `checkpoints`, oldest first."""
    return sorted(
        (int(p.name), p)
        for p in checkpoints.glob("[0-9][0-9][0-9][0-9]")
        if (p / "adapter_model.safetensors").is_file() and (p / METRICS_FILE).is_file()
    )


def latest_checkpoint(checkpoints: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint under `checkpoints`."""
    done = complete_checkpoints(checkpoints)
    return done[-1] if done else None


def missing_checkpoint(model_name: str, step: int, checkpoints: Path) -> AutoRLError:
    """The error for a checkpoint that is not there (never written, or deleted), listing those that are."""
    listing = ", ".join(checkpoint_name(s) for s, _ in complete_checkpoints(checkpoints)) or "none"
    return AutoRLError(f"model {model_name!r} has no checkpoint {checkpoint_name(step)} (checkpoints: {listing})")


def remove_checkpoint(checkpoints: Path, step: int) -> None:
    """Delete checkpoint `step`: renamed out of the layout first, so that a crash midway never leaves a
    checkpoint that looks complete with files missing."""
    for leftover in checkpoints.glob(".deleting-*"):  # from a deletion that a crash cut short
        shutil.rmtree(leftover, ignore_errors=True)
    target = checkpoints / checkpoint_name(step)
    doomed = checkpoints / f".deleting-{checkpoint_name(step)}-{os.getpid()}"
    os.replace(target, doomed)
    shutil.rmtree(doomed)
