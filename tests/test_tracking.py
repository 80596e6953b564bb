"""Each tracker writes where its own tool reads: an MLflow store read back with MlflowClient, TensorBoard event
files read back with tensorboard's EventAccumulator; a missing tracker package is one error line."""

from __future__ import annotations

import importlib.util

import pytest

from autorl.errors import AutoRLError
from autorl.tracking import Tracker, tracker_names
from pipelines.config import RunConfig

SECRET = "s3cret-0123456789-never-written"
CONFIG = RunConfig(judge=f"m@http://judge:{SECRET}@10.0.0.5:8000/v1").model_dump(mode="json")


@pytest.mark.timeout(120)  # MLflow's import: ~3 s
def test_mlflow_run_holds_each_step_and_the_redacted_config_and_a_resumed_run_logs_into_it(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracker = Tracker(["mlflow"], tmp_path, "my-run", "abc123", CONFIG, project="proj")
    tracker.log({"reward": 0.25, "loss": -0.5, "note": "text is not a metric"}, step=1)
    tracker.log({"reward": 0.5}, step=2)
    tracker.finish()
    Tracker(["mlflow"], tmp_path, "my-run", "abc123", CONFIG, project="proj").log({"reward": 0.75}, step=3)

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.info.run_name == "my-run" and run.data.tags["autorl.run_id"] == "abc123"
    history = client.get_metric_history(run.info.run_id, "train/reward")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "train/loss")] == [-0.5]
    assert "train/note" not in run.data.metrics
    params = run.data.params
    assert (
        params["train.loss"] == "grpo"
        and params["steps"] == str(RunConfig().steps)
        and "10.0.0.5:8000" in params["judge"]
    )
    assert not [p for p in (tmp_path / "mlruns").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_tensorboard_event_files_hold_each_step_of_each_split(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(["tensorboard"], tmp_path, "my-run", "abc123", CONFIG)
    tracker.log({"reward": 0.25, "loss": -0.5}, step=1)
    tracker.log({"reward": 0.5}, step=2)
    tracker.log({"reward": 0.125}, step=2, split="val")
    tracker.finish()

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {"train/reward", "train/loss", "val/reward"} <= set(events.Tags()["scalars"])
    assert [(e.step, e.value) for e in events.Scalars("train/reward")] == [(1, 0.25), (2, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("val/reward")] == [(2, 0.125)]
    assert not [p for p in (tmp_path / "tensorboard").rglob("*") if SECRET.encode() in p.read_bytes()]


def test_two_trackers_at_once_and_none_writes_nothing(tmp_path):
    both = Tracker(["tensorboard", "mlflow"], tmp_path / "both", "r", "id1", {"seed": 0})
    both.log({"reward": 1.0}, step=1)
    both.finish()
    assert (tmp_path / "both" / "tensorboard").is_dir() and (tmp_path / "both" / "mlruns").is_dir()
    for off in (False, None, [], ["none"]):
        tracker = Tracker(off, tmp_path / "off", "r", "id2")
        tracker.log({"reward": 1.0}, step=1)
        tracker.finish()
        assert not tracker.enabled and not (tmp_path / "off").exists()


def test_an_unknown_tracker_or_a_missing_package_is_one_line(monkeypatch):
    with pytest.raises(AutoRLError, match=r"--report-to comet: no such tracker; trackers are wandb, mlflow"):
        tracker_names(["comet"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(
        AutoRLError, match=r"^--report-to mlflow needs the mlflow package: pip install 'autorl\[mlflow\]'"
    ):
        tracker_names(["tensorboard", "mlflow"])
    assert tracker_names(True) == ["wandb"] and tracker_names(["none"]) == []


@pytest.mark.parametrize(
    ("report_to", "wandb", "wanted"),
    [(None, True, ["wandb"]), (None, False, []), (["mlflow", "wandb"], False, ["mlflow"]), (["none"], True, [])],
)
def test_no_wandb_takes_wandb_out_of_report_to(report_to, wandb, wanted):
    assert RunConfig(report_to=report_to, wandb=wandb).trackers() == wanted
