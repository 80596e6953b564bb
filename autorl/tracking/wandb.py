"""Weights & Biases: offline files under `<run_dir>/wandb` unless the user configured W&B (WANDB_MODE)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class Run:
    """One W&B run; W&B's system metadata, which holds the command line, is not collected."""

    def __init__(self, run_dir: Path, name: str, run_id: str, config: dict[str, Any] | None, project: str):
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb  # imported on first use: a cached run never loads it

        self._run = wandb.init(
            project=project,
            name=name,
            id=run_id,
            resume="allow",
            dir=run_dir,
            mode=os.environ.get("WANDB_MODE", "offline"),
            config=config,
            # no system metadata: W&B would record the command line, where a URL may carry credentials
            settings=wandb.Settings(silent=True, console="off", x_disable_meta=True),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def finish(self) -> None:
        self._run.finish()
