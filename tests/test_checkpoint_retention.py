"""`Model.log` and `delete_checkpoints` on run directories the tiny-model trainer writes (a backend without a
server: `ServingStandIn`), the keep policies, the history after deletions and crashes, and
`autorl run --keep-checkpoints`: a flag and a task-file key that no cache key sees, and a deleted step named
explicitly is one line listing what exists."""

from __future__ import annotations

import asyncio
import json
import logging

import pandas as pd
import pytest
from pydantic import ValidationError
from transformers import AutoTokenizer

import autorl as art
from autorl.backends.local import LocalServing
from autorl.backends.retention import KeepPolicy, best_step
from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history, reconcile_history
from autorl.errors import AutoRLError
from autorl.task import TaskSpec
from pipelines.config import RunConfig
from pipelines.staged_run import stage_keys
from tests.helpers.cli import TASK, run_error_line
from tests.helpers.training import backend_with_model, groups
from tests.helpers.wandb_records import history as wandb_history

LR = art.TrainConfig(learning_rate=1e-9)


def scored(rewards: list[float], metric: float = 1.0, failures: int = 0) -> list[art.Trajectory | BaseException]:
    """A validation batch: trajectories with `rewards` and a `turns` metric, and `failures` exceptions."""
    trajectories = [
        art.Trajectory(
            messages_and_choices=[{"role": "user", "content": "q"}, {"role": "assistant", "content": f"a{r}"}],
            reward=r,
            metrics={"turns": metric},
            metadata={"input": "q"},
        )
        for r in rewards
    ]
    return [*trajectories, *(RuntimeError("lost") for _ in range(failures))]


def checkpoints_left(model_dir) -> list[str]:
    return sorted(p.name for p in (model_dir / "checkpoints").iterdir())


def test_log_records_each_split_at_its_step_in_a_history_of_its_own_parquet_and_wandb(
    tiny_model, tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    backend, model = backend_with_model(tiny_model, tmp_path, report_metrics=["wandb"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    run_dir = backend.run_dir(model)

    async def scenario():
        base = await model.log(scored([0.0, 1.0], failures=2), split="val")  # trajectories and exceptions
        await model.train(groups(tokenizer), LR)
        await model.train(groups(tokenizer), LR)
        grouped = [art.TrajectoryGroup(scored([0.0, 0.5])), art.TrajectoryGroup(scored([1.0, 1.0], metric=3.0))]
        val = await model.log(grouped, split="val", metrics={"win_rate": 0.25})
        await model.log(scored([0.75]), split="test")
        return base, val

    base, val = asyncio.run(scenario())
    backend.close()
    assert base == {"reward": 0.5, "turns": 1.0, "reward_std_dev": 0.5, "exception_rate": 0.5}
    assert val["reward"] == 0.625 and val["reward_std_dev"] == 0.125 and val["turns"] == 2.0
    assert val["win_rate"] == 0.25 and val["exception_rate"] == 0.0
    records = read_history(run_dir, LOG_HISTORY_FILE)
    assert [(r["step"], r["split"]) for r in records] == [(0, "val"), (2, "val"), (2, "test")]
    assert records[1]["val/reward"] == 0.625 and records[1]["val/win_rate"] == 0.25 and "recorded_at" in records[1]
    assert records[2]["test/reward"] == 0.75
    assert [r["step"] for r in read_history(run_dir)] == [1, 2]  # the training history is the training's
    frame = pd.read_parquet(run_dir / "trajectories" / "val" / "0002.parquet")  # ART's format
    assert list(frame["reward"]) == [0.0, 0.5, 1.0, 1.0] and list(frame["group_index"]) == [0, 0, 1, 1]
    assert list(frame.columns) == ["group_index", "group_metadata", "group_metrics", "group_logs", "reward",
                                   "metrics", "metadata", "tools", "logs", "messages"]  # fmt: skip
    assert len(pd.read_parquet(run_dir / "trajectories" / "val" / "0000.parquet")) == 2
    rows = wandb_history(next((run_dir / "wandb").glob("offline-run-*/run-*.wandb")))
    assert [row["_step"] for row in rows] == [0, 1, 2]
    assert rows[0]["val/reward"] == 0.5 and "train/loss" in rows[1]
    assert {"train/reward", "val/reward", "val/win_rate", "test/reward"} <= rows[2].keys()


def test_delete_checkpoints_keeps_the_latest_the_best_by_val_reward_and_the_served(tiny_model, tmp_path):
    backend, model = backend_with_model(tiny_model, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    run_dir = backend.run_dir(model)
    val_rewards = {1: 0.2, 2: 0.9, 3: 0.4, 4: 0.1, 5: 0.3}

    async def scenario():
        deleted = []
        for step in range(1, 6):
            deleted.append(await model.delete_checkpoints())  # ART's loop: before each step
            await model.train(groups(tokenizer), LR)
            await model.log(scored([val_rewards[step]]), split="val")
        backend.serving(model).held = {4}  # as if step 4 were served (an evaluation of it in progress)
        deleted.append(await model.delete_checkpoints())
        backend.serving(model).held = {5}
        deleted.append(await model.delete_checkpoints())
        return deleted

    deleted = asyncio.run(scenario())
    # before step 3: 1 goes (2 is the best, 2 the latest); before 5: 3; 4 only once no server holds it
    assert deleted == [[], [], [1], [], [3], [], [4]]
    assert checkpoints_left(run_dir) == ["0002", "0005"]
    assert [r["step"] for r in read_history(run_dir)] == [1, 2, 3, 4, 5]
    reconcile_history(run_dir)  # a history that outlived its checkpoints is left as it is
    assert [r["step"] for r in read_history(run_dir)] == [1, 2, 3, 4, 5]
    backend.close()

    # a new backend (a resumed program) trains on from the newest checkpoint
    again, resumed = backend_with_model(tiny_model, tmp_path)
    assert asyncio.run(resumed.get_step()) == 5
    assert asyncio.run(resumed.train(groups(tokenizer), LR))["step"] == 6
    assert checkpoints_left(run_dir) == ["0002", "0005", "0006"]
    assert asyncio.run(resumed.delete_checkpoints(keep="latest:2")) == [2]
    with pytest.raises(AutoRLError, match=r"delete_checkpoints\(keep='latest,worst'\): 'worst' is not"):
        asyncio.run(resumed.delete_checkpoints(keep="latest,worst"))
    again.close()


def test_without_a_logged_metric_the_best_is_the_training_reward_with_a_warning(tiny_model, tmp_path, caplog):
    backend, model = backend_with_model(tiny_model, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    run_dir = backend.run_dir(model)

    async def three_steps():
        for _ in range(3):
            await model.train(groups(tokenizer), LR)

    asyncio.run(three_steps())
    rewards = {r["step"]: r["reward"] for r in read_history(run_dir)}
    assert len(set(rewards.values())) == 1  # the same groups each step: a tie, which goes to the later step
    with caplog.at_level(logging.WARNING, logger="autorl"):
        assert asyncio.run(model.delete_checkpoints()) == [1, 2]
    assert "no 'val/reward' was logged for any checkpoint" in caplog.text and "training reward" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autorl"):  # the training reward asked for: no warning
        assert asyncio.run(model.delete_checkpoints("train/reward", keep="every:2")) == []
    assert caplog.text == "" and checkpoints_left(run_dir) == ["0003"]
    backend.close()


def test_keep_policies():
    steps = [1, 2, 3, 4, 5, 6]
    assert KeepPolicy.parse("all").steps_to_keep(steps, None) == set(steps)
    assert KeepPolicy.parse("latest,best").steps_to_keep(steps, 2) == {2, 6}
    assert KeepPolicy.parse("latest").steps_to_keep(steps, 2) == {6}
    assert KeepPolicy.parse("latest:3, best").steps_to_keep(steps, 1) == {1, 4, 5, 6}
    assert KeepPolicy.parse("every:4").steps_to_keep(steps, 1) == {4, 6}  # the newest always
    assert KeepPolicy.parse("best").steps_to_keep(steps, None) == {6}
    assert KeepPolicy.parse("latest,best").steps_to_keep([], None) == set()
    for bad, why in (("", "names no checkpoints"), ("latest:0", "'latest:0' is not"), ("every", "needs a step count"),
                     ("all,best", "'all' is not"), ("newest", "'newest' is not")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            KeepPolicy.parse(bad)
    records = [{"step": 1, "r": 0.5}, {"step": 2, "r": 0.9}, {"step": 2, "r": 0.1}, {"step": 3, "r": float("nan")}]
    assert best_step(records, "r") == 2  # per step the mean, 0.5 both: the later step; NaN is no value
    assert best_step([*records, {"step": 1, "r": 0.7}], "r") == 1 and best_step(records, "x") is None


def write_checkpoint(run_dir, step: int) -> None:
    path = run_dir / "checkpoints" / f"{step:04d}"
    path.mkdir(parents=True)
    (path / "adapter_model.safetensors").write_bytes(b"")
    (path / "metrics.json").write_text(json.dumps({"step": step, "reward": step / 10, "from": "checkpoint"}))


def test_reconcile_after_deletions_takes_each_step_from_its_checkpoint_or_its_history_line(tmp_path):
    for step in (2, 4, 5):  # 1 and 3 were deleted; 5's history line was lost in a crash, torn mid-line
        write_checkpoint(tmp_path, step)
    lines = [json.dumps({"step": s, "reward": s / 10, "from": "history"}) for s in range(1, 5)]
    (tmp_path / "history.jsonl").write_text("\n".join(lines) + '\n{"step": 5, "rew')
    reconcile_history(tmp_path)
    history = read_history(tmp_path)
    assert [(r["step"], r["from"]) for r in history] == [
        (1, "history"), (2, "checkpoint"), (3, "history"), (4, "checkpoint"), (5, "checkpoint"),
    ]  # fmt: skip


def test_keep_checkpoints_is_a_flag_and_a_task_file_key_that_no_cache_key_sees(run, tmp_path):
    assert run(TASK)[1].keep_checkpoints == "all"
    assert run(TASK, "--keep-checkpoints", "latest,best")[1].keep_checkpoints == "latest,best"
    task_file = tmp_path / "task.toml"
    task_file.write_text(f'description = "{TASK}"\nkeep_checkpoints = "latest:3,best"\n')
    assert run(str(task_file))[1].keep_checkpoints == "latest:3,best"
    assert run(str(task_file), "--keep-checkpoints", "every:5")[1].keep_checkpoints == "every:5"  # the flag wins
    assert run_error_line(TASK, "--keep-checkpoints", "latest,worst") == (
        "error: --keep-checkpoints: 'worst' is not a checkpoint policy; use all, or a comma-separated set of "
        "latest, latest:N, best and every:N (e.g. latest,best)"
    )
    with pytest.raises(ValidationError):
        RunConfig(keep_checkpoints="every:0")
    task = TaskSpec(description=TASK)
    assert stage_keys(task, RunConfig(keep_checkpoints="latest,best")) == stage_keys(task, RunConfig())


def test_serving_a_deleted_checkpoint_is_one_line_naming_the_checkpoints_there_are(tmp_path):
    for step in (2, 5):
        write_checkpoint(tmp_path, step)
    (tmp_path / "checkpoints" / "0005" / "adapter_config.json").write_text("{}")
    model = art.TrainableModel(name="policy")
    # refused before the server or the torch thread is asked
    serving = LocalServing(model, tmp_path, server=None, max_restarts=0, torch_thread=None)
    with pytest.raises(AutoRLError, match=r"^model 'policy' has no checkpoint 0003 \(checkpoints: 0002, 0005\)$"):
        asyncio.run(serving._load(3))
