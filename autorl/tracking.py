"""Weights & Biases logging: offline files unless the user configured W&B (WANDB_MODE).

A `Tracker` is one W&B run. `autorl run` keeps one per run (`<run dir>/wandb`); a backend keeps one per model
that reports to W&B (`Model.report_metrics`), logging its training steps and what `Model.log` records.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .redaction import redacted


class Tracker:
    """Logs metrics to a W&B run under `<run_dir>/wandb` (or does nothing when disabled), started on first use;
    its config is `config` with every secret redacted (`autorl.redaction`), and W&B's system metadata, which
    holds the command line, is not collected."""

    def __init__(
        self,
        enabled: bool,
        run_dir: Path,
        name: str,
        run_id: str,
        config: dict[str, Any] | None = None,
        project: str = "autorl",
    ):
        self.enabled, self.run_dir, self.name, self.run_id = enabled, run_dir, name, run_id
        self.config = redacted(config) if config else config
        self.project = project
        self._run = None

    def log(self, metrics: dict[str, Any], step: int, split: str = "train") -> None:
        """Log the numbers of `metrics` as `<split>/<name>` at `step` (W&B drops a step below one logged before)."""
        if not self.enabled:
            return
        if self._run is None:
            os.environ.setdefault("WANDB_SILENT", "true")
            import wandb  # imported on first use: a cached run never loads it

            self._run = wandb.init(
                project=self.project,
                name=self.name,
                id=self.run_id,
                resume="allow",
                dir=self.run_dir,
                mode=os.environ.get("WANDB_MODE", "offline"),
                config=self.config,
                # no system metadata: W&B would record the command line, where a URL may carry credentials
                settings=wandb.Settings(silent=True, console="off", x_disable_meta=True),
            )
        self._run.log({f"{split}/{k}": v for k, v in metrics.items() if isinstance(v, int | float)}, step=step)

    def finish(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
