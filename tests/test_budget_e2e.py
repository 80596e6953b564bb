"""A budget stops a real run (the embedded model on vLLM, a program judge) at the end of the step that crosses it,
and the same command with a higher budget resumes it; the run's trackers (MLflow, TensorBoard) get its steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.limits import scaled

pytestmark = pytest.mark.slow
TASK = """
description = "Answer the user's question in one short sentence."
system_prompt = "Answer in one short sentence."
inputs_file = "inputs.jsonl"
"""
INPUTS = ["What colour is the sky?", "Name a fruit.", "What is 2 + 2?", "Name a planet.", "Say hello.", "Name a tree."]
RUN = ["--group-size", "2", "--groups-per-step", "1", "--max-tokens", "16", "--eval-samples", "2", "--steps", "3",
       "--preflight", "off", "--judge", "benchmarks.perf.learning_tasks.judges:uppercase", "--price-per-hour", "3.6",
       "--report-to", "mlflow,tensorboard"]  # fmt: skip


def autorl(home: Path, task: Path, *args: str) -> str:
    """`autorl run` as a user runs it; its output (it must succeed: a budget stop is a clean end)."""
    command = [sys.executable, "-m", "pipelines.cli", "run", str(task), "--home", str(home), "--name", "b", *RUN]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=scaled(600), env=os.environ)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.timeout(1500)  # three runs, each a vLLM start on the embedded model
def test_a_budget_stops_the_run_after_the_step_that_crosses_it_and_a_higher_one_resumes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read the run's MLflow file store (MLflow 3)
    task = tmp_path / "task.toml"
    task.write_text(TASK)
    rows = [{"input": text, "split": "val" if n >= 4 else "train"} for n, text in enumerate(INPUTS)]
    (tmp_path / "inputs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    home, run_dir = tmp_path / "home", tmp_path / "home" / "runs" / "b"

    def record() -> dict:
        return json.loads((run_dir / "run.json").read_text())

    # 1 token: the baseline's rollouts cross it, so the run stops before training
    output = autorl(home, task, "--budget-tokens", "1")
    assert "budget reached after stage baseline" in output and record()["status"] == "budget"
    before_training = record()["cost"]["tokens_total"]
    assert before_training > 0 and "train" not in record()["stages"]

    # a budget just above it: the first step's rollouts cross it; the run stops once step 1 is checkpointed
    output = autorl(home, task, "--budget-tokens", str(before_training + 1))
    assert "budget reached after step 1" in output, output
    stopped = record()
    assert stopped["status"] == "budget" and "step 1" in stopped["stopped"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["0001"]
    assert "evaluate" not in stopped["stages"] and "budget reached after step 1" in (run_dir / "report.md").read_text()
    step_one = stopped["stages"]["train"]["cost"]
    assert step_one["tokens"]["policy"]["completion"] > 0 and step_one["usd"]["compute"] > 0

    # a higher budget: training resumes at step 2 (step 1 is not trained again) and the run finishes
    output = autorl(home, task, "--budget-usd", "1000")
    done = record()
    assert done["status"] == "done" and "stopped" not in done, output
    history = [json.loads(line)["step"] for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert history == [1, 2, 3]
    train_dir = home / "artifacts" / "train" / done["keys"]["train"]
    assert json.loads((train_dir / "steps" / "0001" / "cost.json").read_text())["spent"] == step_one
    stages = done["stages"]
    assert stages["baseline"]["cached"] and stages["baseline"]["cost"]["tokens_total"] > 0  # a cached stage's cost
    assert done["cost"]["tokens_total"] == sum(
        stage["cost"]["tokens_total"] for stage in stages.values() if "cost" in stage
    )
    per_step = stages["train"]["step_costs"]  # each step's, in the order trained
    assert [c["step"] for c in per_step] == [1, 2, 3] and per_step[0]["tokens_total"] == step_one["tokens_total"]
    report = (run_dir / "report.md").read_text()
    assert "## Cost" in report and "--budget-usd 1000" in report and "Cost per training step (3 steps):" in report
    per_point = report.split("## Cost per point gained")[1]  # training's and the whole run's USD over the gain
    assert "| training |" in per_point and "| whole run |" in per_point

    # both trackers got every step, read back by their own tools
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("autorl").experiment_id])
    assert sorted(m.step for m in client.get_metric_history(mlflow_run.info.run_id, "train/reward")) == [1, 2, 3]
    assert sorted(m.step for m in client.get_metric_history(mlflow_run.info.run_id, "train/cost/usd")) == [1, 2, 3]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert sorted({e.step for e in events.Scalars("train/reward")}) == [1, 2, 3]
