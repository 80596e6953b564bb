"""TensorBoard: event files under `<run_dir>/tensorboard` (`tensorboard --logdir <run_dir>/tensorboard`); the
config goes in as a text summary at step 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Run:
    """One TensorBoard event file writer (torch's `SummaryWriter`, which needs the tensorboard package)."""

    def __init__(self, run_dir: Path, name: str, run_id: str, config: dict[str, Any] | None, project: str):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if config:
            self.writer.add_text("config", f"```json\n{json.dumps(config, indent=1)}\n```", 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()
