"""Where a run's metrics go besides its run directory: Weights & Biases, MLflow, TensorBoard (TRL's `report_to`).

A `Tracker` is one run's trackers: `autorl run` keeps one per run (`--report-to`, files under the run directory),
a backend keeps one per model that reports metrics (`Model.report_metrics`), logging its training steps and
what `Model.log` records. Each tracker backend is a module of this package with a `Run` class (`TrackerRun`);
its package is imported on the first metric, so a cached run loads none of them, and checked for at the start,
so a missing one is one error line before any model call.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any, Protocol

from ..errors import AutoRLError
from ..redaction import redacted

PACKAGES = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow"), "tensorboard": ("tensorboard", "tensorboard")}
"""Per tracker: the package it imports and the extra of autorl that installs it (`pip install 'autorl[mlflow]'`)."""


class TrackerRun(Protocol):
    """One run of one tracker backend (`<module>.Run(run_dir, name, run_id, config, project)`)."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record `metrics` (names already prefixed by their split) at `step`."""
        ...

    def finish(self) -> None:
        """End the run (files flushed)."""
        ...


def tracker_names(report_to: bool | list[str] | None) -> list[str]:
    """The trackers a `report_to` value names: True means W&B (the default before `--report-to` existed),
    False, None or "none" none; unknown names and a missing package raise one AutoRLError line."""
    if report_to is None or report_to is False:
        return []
    names = ["wandb"] if report_to is True else [n for n in dict.fromkeys(report_to) if n != "none"]
    for name in names:
        if name not in PACKAGES:
            raise AutoRLError(f"--report-to {name}: no such tracker; trackers are {', '.join(PACKAGES)} (or none)")
        package, extra = PACKAGES[name]
        if importlib.util.find_spec(package) is None:
            raise AutoRLError(
                f"--report-to {name} needs the {package} package: pip install 'autorl[{extra}]' (or --report-to none)"
            )
    return names


class Tracker:
    """Logs metrics to each chosen tracker (none when `report_to` names none), each started on first use
    under `run_dir` (W&B: `wandb/`, MLflow: `mlruns/` unless MLFLOW_TRACKING_URI says otherwise, TensorBoard:
    `tensorboard/`); `config` is recorded with every secret redacted (`autorl.redaction`)."""

    def __init__(
        self,
        report_to: bool | list[str] | None,
        run_dir: Path,
        name: str,
        run_id: str,
        config: dict[str, Any] | None = None,
        project: str = "autorl",
    ):
        self.names = tracker_names(report_to)
        self.run_dir, self.name, self.run_id, self.project = run_dir, name, run_id, project
        self.config = redacted(config) if config else config
        self._runs: list[TrackerRun] | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.names)

    def log(self, metrics: dict[str, Any], step: int, split: str = "train") -> None:
        """Log the numbers of `metrics` as `<split>/<name>` at `step` (W&B drops a step below one logged before)."""
        if not self.names:
            return
        if self._runs is None:
            self._runs = [
                importlib.import_module(f"{__name__}.{name}").Run(
                    self.run_dir, self.name, self.run_id, self.config, self.project
                )
                for name in self.names
            ]
        numbers = {f"{split}/{k}": v for k, v in metrics.items() if isinstance(v, int | float)}
        for run in self._runs:
            run.log(numbers, step)

    def finish(self) -> None:
        for run in self._runs or []:
            run.finish()
        self._runs = None
