"""The checkpoint layout of a run directory: `checkpoints/NNNN/` holds a PEFT LoRA and its metrics."""

from __future__ import annotations

from pathlib import Path

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
