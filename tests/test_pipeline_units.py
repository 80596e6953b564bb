"""The pipeline's cache keys, forced stages, atomic artifacts, statistics and run-level errors."""

import errno

import pytest
from typer.testing import CliRunner

from autorl.cli import app
from autorl.errors import AutoRLError
from autorl.task import TaskSpec
from pipelines.artifacts import ArtifactStore
from pipelines.config import STAGES, RunConfig
from pipelines.pipeline import forced_stages, stage_keys
from pipelines.stats import mean_ci

TASK = TaskSpec(description="Turn a casual sentence into formal business English")


def changed(before: dict, after: dict) -> set[str]:
    return {stage for stage in STAGES if before[stage] != after[stage]}


def test_a_setting_changes_only_the_stages_that_depend_on_it():
    base = stage_keys(TASK, RunConfig())
    assert stage_keys(TASK, RunConfig()) == base  # deterministic
    assert changed(base, stage_keys(TASK, RunConfig(learning_rate=1e-4))) == {"train", "evaluate", "report"}
    assert changed(base, stage_keys(TASK, RunConfig(steps=3))) == {"evaluate", "report"}
    assert changed(base, stage_keys(TASK, RunConfig(model="/models/other"))) == {"baseline", "train", "evaluate", "report"}
    assert changed(base, stage_keys(TASK, RunConfig(num_inputs=12))) == set(STAGES) - {"system_prompt"}
    assert changed(base, stage_keys(TASK, RunConfig(home="/elsewhere", wandb=False))) == set()


def test_force_recomputes_a_stage_and_everything_after_it():
    assert forced_stages([]) == set()
    assert forced_stages(["train"]) == {"train", "evaluate", "report"}
    assert forced_stages(["all"]) == set(STAGES)
    with pytest.raises(AutoRLError, match="--force trian: no such stage"):
        forced_stages(["trian"])


def test_a_failed_write_leaves_the_previous_artifact_valid(tmp_path):
    store = ArtifactStore(tmp_path)
    with store.write("inputs", "k1", {}) as out:
        (out / "inputs.jsonl").write_text("old\n")
    with pytest.raises(AutoRLError, match="disk full while writing the inputs artifact"):
        with store.write("inputs", "k1", {}) as out:
            (out / "inputs.jsonl").write_text("new, half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert store.exists("inputs", "k1")
    assert (store.path("inputs", "k1") / "inputs.jsonl").read_text() == "old\n"
    assert [p.name for p in (tmp_path / "inputs").iterdir()] == ["k1"], "no temporary directory left"


def test_mean_ci_on_fixed_data():
    mean, low, high = mean_ci([0.0, 1.0] * 50)
    assert mean == 0.5 and low < 0.5 < high and high - low < 0.25
    assert mean_ci([0.7]) == (0.7, 0.7, 0.7)
    assert mean_ci([0.2, 0.4, 0.9], seed=1) == mean_ci([0.2, 0.4, 0.9], seed=1)


def cli_error(*args) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, result.output
    return result.output.strip().splitlines()[-1]


def test_a_run_name_taken_by_another_task_is_refused(tmp_path):
    run = tmp_path / "runs" / "mine"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"name": "mine", "task": {"description": "something else"}, "wandb_id": "x"}')
    line = cli_error("run", "Summarise a news article", "--name", "mine", "--home", str(tmp_path))
    assert line == "error: run 'mine' exists with a different task; choose another --name, or pass --resume to replace its task"


def test_task_file_with_unknown_field(tmp_path):
    task = tmp_path / "task.toml"
    task.write_text('description = "Summarise a news article"\nnum_input = 4\n')
    assert "num_input" in cli_error("run", str(task), "--home", str(tmp_path))


def test_run_help_documents_every_flag():
    result = CliRunner().invoke(app, ["run", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for flag in ("--steps", "--group-size", "--groups-per-step", "--inputs", "--eval-samples", "--model", "--judge",
                 "--generator", "--learning-rate", "--max-tokens", "--seed", "--name", "--home", "--port",
                 "--wandb", "--no-wandb", "--force", "--resume"):  # fmt: skip
        line = next(line for line in result.output.splitlines() if flag in line)
        assert len(line.split(flag, 1)[1].strip()) > 10, f"{flag} has no help text"
