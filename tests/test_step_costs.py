"""Each training step's cost where a user looks: the train stage (a scripted policy, a stand-in for the trainer)
logs it to the run's trackers beside the step's reward (TensorBoard's event files read back), run.json's train
entry lists it step by step, `autorl show` and the report's cost section summarise it (short for many steps)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from autorl.backends.run_dir import append_history
from autorl.tracking import Tracker
from autorl.training.checkpoints import METRICS_FILE, checkpoint_name
from pipelines import costs
from pipelines.cli import app
from pipelines.config import RunConfig
from pipelines.records import step_costs
from pipelines.records.pricing import Meter
from pipelines.stage_context import StageContext
from pipelines.staged_run import _record_cost
from pipelines.stages import train
from ruler import FunctionJudge
from tests.helpers.pipeline import TASK, TRAIN, ScriptedPolicy, upstream_artifacts


class StandInModel:
    """Trains nothing: each `train` writes the next checkpoint and history line as the trainer does."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.step = run_dir, 0

    async def train(self, groups: list, config: object) -> dict[str, float]:
        self.step += 1
        checkpoint = self.run_dir / "checkpoints" / checkpoint_name(self.step)
        checkpoint.mkdir(parents=True)
        (checkpoint / "adapter_model.safetensors").write_text("")
        metrics = {"reward": 0.5, "reward_std": 0.1, "loss": 0.0, "groups_trained": 1, "groups": 1, "step_time_s": 0.0}
        (checkpoint / METRICS_FILE).write_text(json.dumps(metrics))
        append_history(self.run_dir, {"step": self.step, **metrics})
        return metrics

    async def delete_checkpoints(self, metric: str, keep: object) -> None:
        pass


class MeteredPolicy(ScriptedPolicy):
    """The scripted policy with what `Policy` adds for a step's cost: a meter of its answers' tokens, a model."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir, ["a", "bb", "ccc"])
        self.meter, self.model = Meter(), StandInModel(run_dir)
        self.delays = dict.fromkeys(TRAIN, 0.05)  # every step takes time: priced by --price-per-hour

    async def answer(self, prompt: str, text: str, config: RunConfig, name: str | None = None):
        self.meter.add("policy", config.model, 40, 10)
        return await super().answer(prompt, text, config, name)


@pytest.mark.timeout(120)
def test_each_step_s_cost_is_in_the_trackers_run_json_show_and_the_report(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = RunConfig(
        group_size=2, groups_per_step=1, steps=3, preflight="off", price_per_hour=36000, validate_every=0
    )
    keys, store = upstream_artifacts(tmp_path, config)
    policy = MeteredPolicy(tmp_path / "train")
    judge = FunctionJudge(lambda messages: len(messages[-1]["content"]) / 3)
    tracker = Tracker(["tensorboard"], tmp_path / "run", "run", "id")
    ctx = StageContext(TASK, config, store, keys, policy, judge, tracker, tmp_path / "run", Console(width=200))
    asyncio.run(train.run(ctx))
    tracker.finish()
    spent = [
        json.loads((policy.run_dir / "steps" / checkpoint_name(n) / step_costs.STEP_COST).read_text())["spent"]
        for n in (1, 2, 3)
    ]
    assert all(s["usd"]["total"] > 0 and s["tokens_total"] == 100 for s in spent)  # 2 answers of 50 tokens

    # the trackers: cost/usd, cost/tokens, cost/seconds at each step, beside its reward
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    for metric, value in (("usd", lambda s: s["usd"]["total"]), ("tokens", lambda s: s["tokens_total"])):
        logged = [(e.step, e.value) for e in events.Scalars(f"train/cost/{metric}")]
        assert logged == [(n, pytest.approx(value(s))) for n, s in zip((1, 2, 3), spent, strict=True)]
    assert [e.value for e in events.Scalars("train/cost/seconds")] == pytest.approx([s["seconds"] for s in spent])
    assert [e.value for e in events.Scalars("train/inputs_drawn")] == [1, 1, 1]  # no group tied: none drawn more

    # run.json: the train entry lists each step's cost, and they add up to the stage's
    record = {"name": "r", "status": "done", "task": {"description": "t"}, "stages": {"train": {"cached": False}}}
    _record_cost(record, ctx)
    entry = record["stages"]["train"]
    assert entry["step_costs"] == [
        {"step": n, "seconds": s["seconds"], "tokens_total": 100, "usd_total": s["usd"]["total"]}
        for n, s in zip((1, 2, 3), spent, strict=True)
    ]
    assert sum(s["usd_total"] for s in entry["step_costs"]) == pytest.approx(entry["cost"]["usd"]["total"])
    (tmp_path / "home" / "runs" / "r").mkdir(parents=True)
    (tmp_path / "home" / "runs" / "r" / "run.json").write_text(json.dumps(record))

    # `autorl show`: the fewest, median and most per step, and the last step's
    shown = CliRunner().invoke(app, ["show", "r", "--home", str(tmp_path / "home")], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.output.split())
    assert "cost per training step (3 steps)" in said and "min, median and max: of each column on its own" in said
    usd = sorted(s["usd"]["total"] for s in spent)
    last = [line for line in shown.output.splitlines() if "last (step 3)" in line]
    assert last and " 100 " in last[0] and f"{spent[-1]['usd']['total']:.4f}" in last[0]
    assert [line for line in shown.output.splitlines() if "median" in line and f"{usd[1]:.4f}" in line]

    # the report's cost section (and a budget-stopped run's report): the same rows as a Markdown table
    lines = step_costs.step_cost_lines(step_costs.step_costs(ctx))
    section = costs.report_section(ctx, costs.run_costs(ctx))
    assert section[-len(lines) :] == lines and "\n".join(lines) in costs.budget_report("r", "budget", ctx)
    assert lines[1] == "Cost per training step (3 steps):" and lines[3] == "| steps | seconds | tokens | total USD |"
    assert lines[5].startswith("| min |") and lines[5].endswith(f"| 100 | {usd[0]:.4f} |")
    assert lines[-1] == "Min, median and max: of each column on its own, not one step's."
    assert lines[-3].startswith("| last (step 3) |") and lines[-3].endswith(f"{spent[-1]['usd']['total']:.4f} |")


def test_the_summary_stays_four_rows_for_many_steps_and_counts_those_a_rollback_dropped():
    steps = [{"step": n, "seconds": float(n), "tokens_total": 10 * n, "usd_total": n / 100} for n in range(1, 25)]
    dropped = [{**steps[1], "dropped": True}, {**steps[2], "dropped": True}]
    title, rows = step_costs.step_cost_summary([*dropped, *steps])
    assert title == "cost per training step (26 steps, 2 of them dropped by a rollback and trained again)"
    assert rows == [
        ("min", "1.0", "10", "0.0100"),
        ("median", "11.5", "115", "0.1150"),  # of the 26: the dropped steps 2 and 3 count
        ("max", "24.0", "240", "0.2400"),
        ("last (step 24)", "24.0", "240", "0.2400"),
    ]
    assert step_costs.step_cost_lines([]) == []  # a run trained before steps were priced: no section
