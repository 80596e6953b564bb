"""MLflow: a run in the experiment named after the project, in MLFLOW_TRACKING_URI's store, else a file store
under `<run_dir>/mlruns` (MLflow 3 keeps its file store behind MLFLOW_ALLOW_FILE_STORE, which this sets for that
directory only when the user has not set it). A resumed autorl run logs into the same MLflow run (found by its
`autorl.run_id` tag)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RUN_ID_TAG = "autorl.run_id"
MAX_PARAM = 6000
"""MLflow's longest parameter value; a longer one is cut."""


class Run:
    """One MLflow run, its parameters the config's leaves (`train.loss`, ...), its metrics logged per step."""

    def __init__(self, run_dir: Path, name: str, run_id: str, config: dict[str, Any] | None, project: str):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (run_dir / "mlruns").resolve().as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
        found = self.client.search_runs([experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1)
        if found:
            self.id = found[0].info.run_id
            self.client.update_run(self.id, status="RUNNING")
        else:
            self.id = self.client.create_run(experiment_id, run_name=name, tags={RUN_ID_TAG: run_id}).info.run_id
            params = [Param(key, value[:MAX_PARAM]) for key, value in flat_params(config or {}).items()]
            for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters a batch
                self.client.log_batch(self.id, params=params[start : start + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def finish(self) -> None:
        self.client.set_terminated(self.id)


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The leaves of a nested config as MLflow parameters: dotted names, values as text (lists as JSON)."""
    params: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            params.update(flat_params(value, f"{prefix}{key}."))
        else:
            params[f"{prefix}{key}"] = value if isinstance(value, str) else json.dumps(value)
    return params
