"""ART's on-disk layout and its analysis tools in autorl: `autorl.utils.output_dirs`, ART's parquet files
(`trajectory_logging`), `get_model_step`, `strip_logprobs`, the module paths `autorl.auto_trajectory` /
`autorl.yield_trajectory`, `register(_openai_client_config=...)`, and `autorl.utils.benchmarking`'s table and
charts, tested by the data they plot. No server: files written as `model.log` writes them, a backend's layout
with a serving stand-in."""

from __future__ import annotations

import asyncio
import json
import os

import pyarrow.parquet as pq
import pytest
from openai.types.chat.chat_completion import Choice

import autorl as art
from autorl.backends.art_layout import BASE_CHECKPOINT_FILE
from autorl.errors import UnsupportedArgumentError
from autorl.utils import get_model_step
from autorl.utils.output_dirs import get_model_dir, get_step_checkpoint_dir, get_trajectories_split_dir
from autorl.utils.strip_logprobs import strip_logprobs
from autorl.utils.trajectory_logging import read_trajectory_groups_parquet, write_trajectory_groups_parquet
from tests.helpers.training import ServingStandIn

pl = pytest.importorskip("polars", reason="autorl.utils.benchmarking needs the plotting extra (polars)")

CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}


def sampled(content: str, tool_calls: list | None = None) -> Choice:
    message = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}
    logprobs = {"content": [{"token": "a", "logprob": -0.5, "bytes": None, "top_logprobs": []}]}
    return Choice.model_validate({"index": 0, "finish_reason": "stop", "message": message, "logprobs": logprobs})


def trajectory(reward: float, **fields) -> art.Trajectory:
    messages = [{"role": "user", "content": "q"}, sampled("", [CALL]), {"role": "tool", "tool_call_id": "c1",
                "content": "42"}, sampled("it is 42")]  # fmt: skip
    return art.Trajectory(messages_and_choices=messages, reward=reward, **fields)


def test_parquet_files_are_arts_and_read_back(tmp_path):
    """ART's columns and message structs, a `Choice` marked trainable, tool calls as JSON; read back as groups."""
    groups = [
        art.TrajectoryGroup([trajectory(0.5, metrics={"acc": 1.0}, metadata={"id": 7}, logs=["l"])], metadata={"g": 1}),
        art.TrajectoryGroup([trajectory(1.0), trajectory(0.0)], exceptions=[ValueError("x")]),
    ]
    path = tmp_path / "0001.parquet"
    write_trajectory_groups_parquet(groups, path)
    table = pq.read_table(path)
    assert table.column_names == ["group_index", "group_metadata", "group_metrics", "group_logs", "reward",
                                  "metrics", "metadata", "tools", "logs", "messages"]  # fmt: skip
    rows = table.to_pylist()
    assert [r["group_index"] for r in rows] == [0, 1, 1] and rows[0]["group_metadata"] == '{"g": 1}'
    assert json.loads(rows[0]["metrics"]) == {"acc": 1.0} and rows[1]["metrics"] is None
    messages = rows[0]["messages"]
    assert [(m["role"], m["trainable"]) for m in messages] == [
        ("user", False), ("assistant", True), ("tool", False), ("assistant", True)
    ]  # fmt: skip
    assert json.loads(messages[1]["tool_calls"]) == [CALL] and messages[2]["tool_call_id"] == "c1"
    back = read_trajectory_groups_parquet(path)
    assert [[t.reward for t in g.trajectories] for g in back] == [[0.5], [1.0, 0.0]]
    assert back[0].metadata == {"g": 1} and back[0].trajectories[0].metadata == {"id": 7}
    assert back[0].trajectories[0].messages_and_choices[3] == {"role": "assistant", "content": "it is 42"}


def test_output_dirs_get_model_step_and_strip_logprobs(tmp_path):
    model = art.TrainableModel(name="m", project="p")
    model_dir = get_model_dir(model, str(tmp_path))
    assert model_dir == f"{tmp_path}/p/models/m"
    assert get_step_checkpoint_dir(model_dir, 3) == f"{model_dir}/checkpoints/0003"
    assert get_model_step(model, str(tmp_path)) == 0
    for step in (0, 2, 5):
        (tmp_path / "p" / "models" / "m" / "checkpoints" / f"{step:04d}").mkdir(parents=True)
    assert get_model_step(model, str(tmp_path)) == 5
    choice = sampled("hi")
    data = {"logprobs": [1], "choices": [choice], "pair": ({"logprobs": 2, "x": 1},)}
    stripped = strip_logprobs(data)
    assert stripped["choices"][0].logprobs is None and stripped["pair"] == ({"x": 1},) and "logprobs" not in stripped
    assert choice.logprobs is not None and data["logprobs"] == [1]  # the original is untouched


def test_arts_module_paths_are_the_capture_scopes():
    from autorl.auto_trajectory import auto_trajectory, capture_auto_trajectory
    from autorl.yield_trajectory import capture_yielded_trajectory, yield_trajectory

    assert (auto_trajectory, capture_auto_trajectory) == (art.auto_trajectory, art.capture_auto_trajectory)
    assert (yield_trajectory, capture_yielded_trajectory) == (art.yield_trajectory, art.capture_yielded_trajectory)


def test_openai_client_config_sets_the_server_or_refuses_in_one_line():
    class Registering:
        async def register(self, model):
            self.server = dict(model.server)

    backend = Registering()
    model = art.TrainableModel(name="m")
    config = {"engine_args": {"enforce_eager": True, "max_model_len": 1024}, "server_args": {"port": 8123}}
    asyncio.run(model.register(backend, _openai_client_config=config))
    assert backend.server == {"enforce_eager": True, "max_model_len": 1024, "port": 8123}
    for bad, named in (
        ({"log_file": "x.log"}, "'log_file'"),
        ({"server_args": {"api_key": "k"}}, "server_args.api_key"),
    ):
        with pytest.raises(UnsupportedArgumentError, match=named):
            asyncio.run(art.TrainableModel(name="n").register(backend, _openai_client_config=bad))


class Placement:
    async def start_serving(self, model, run_dir):
        return ServingStandIn()

    def close(self):
        pass


class Trainer:
    """Saves a checkpoint per step as the trainer does; its metrics say whether any group had signal."""

    def __init__(self, run_dir):
        self.checkpoints = run_dir / "checkpoints"

    async def step(self, groups, config, step):
        path = self.checkpoints / f"{step:04d}"
        path.mkdir(parents=True)
        (path / "adapter_model.safetensors").write_text("")
        tied = sum(len({t.reward for t in g.trajectories}) == 1 for g in groups)
        metrics = {"groups": len(groups), "groups_trained": len(groups) - tied, "groups_skipped_tied": tied}
        (path / "metrics.json").write_text(json.dumps({"step": step, **metrics}))
        return metrics

    def close(self):
        pass


def test_arts_layout_base_checkpoint_tied_step_and_the_old_layout_moved(tmp_path, caplog):
    """Checkpoint 0000 at registration; a step whose groups all tie takes the place of the checkpoint before it;
    a model directory of the old layout (`<path>/<project>/<name>`) is moved to ART's, with a warning."""
    old = tmp_path / "p" / "moved" / "checkpoints" / "0001"
    old.mkdir(parents=True)
    (old / "adapter_model.safetensors").write_text("")
    (old / "metrics.json").write_text("{}")
    backend = art.LocalBackend(tmp_path)
    backend.placement = Placement()
    backend.placement.trainer = lambda model, run_dir: Trainer(run_dir)

    async def scenario():
        moved = art.TrainableModel(name="moved", project="p")
        await moved.register(backend)
        model = art.TrainableModel(name="m", project="p")
        await model.register(backend)
        model_dir = get_model_dir(model, str(tmp_path))
        assert (
            json.loads((tmp_path / get_step_checkpoint_dir(model_dir, 0) / BASE_CHECKPOINT_FILE).read_text())[
                "base_model"
            ]
            == model.base_model
        )
        signal, tie = (
            art.TrajectoryGroup([trajectory(0.0), trajectory(1.0)]),
            art.TrajectoryGroup([trajectory(1.0)] * 2),
        )
        steps = [(await backend.train(model, groups)).step for groups in ([signal], [tie, tie], [signal])]
        return await moved.get_step(), steps, sorted(p.name for p in (tmp_path / model_dir / "checkpoints").iterdir())

    moved_step, steps, left = asyncio.run(scenario())
    backend.close()
    assert moved_step == 1 and (tmp_path / "p" / "models" / "moved" / "checkpoints" / "0001").is_dir()
    assert not (tmp_path / "p" / "moved").exists() and "moved model directory" in caplog.text
    assert steps == [1, 2, 3] and left == ["0000", "0002", "0003"]  # ART's step skipping


def write_logged(art_path, name: str, split: str, rewards_by_step: dict[int, list[float]]) -> None:
    model = art.TrainableModel(name=name, project="cmp")
    directory = get_trajectories_split_dir(get_model_dir(model, str(art_path)), split)
    os.makedirs(directory, exist_ok=True)
    for step, rewards in rewards_by_step.items():
        groups = [art.TrajectoryGroup([trajectory(r, metrics={"acc": r}) for r in rewards], metadata={"n": step})]
        write_trajectory_groups_parquet(groups, f"{directory}/{step:04d}.parquet")


def test_load_trajectories_and_the_charts_plot_each_models_mean_per_step(tmp_path):
    from autorl.utils.benchmarking.charts import percentage_comparison_bar_chart, training_progress_chart
    from autorl.utils.benchmarking.load_trajectories import load_trajectories
    from autorl.utils.benchmarking.types import BenchmarkModelKey

    write_logged(tmp_path, "trained", "val", {0: [0.0, 0.5], 1: [0.5, 1.0], 2: [1.0, 1.0]})
    write_logged(tmp_path, "trained", "train", {1: [0.0, 0.0]})
    write_logged(tmp_path, "prompted", "val", {0: [0.5, 0.5]})
    df = asyncio.run(load_trajectories("cmp", art_path=str(tmp_path)))
    assert df.height == 10 and df["group_number"].n_unique() == 5
    assert {"model", "split", "step", "reward", "messages", "logs", "metric_acc", "group_metadata_n"} <= set(df.columns)
    assert df.filter(pl.col("model") == "prompted")["messages"][0][1]["trainable"] is True
    assert asyncio.run(load_trajectories("none", art_path=str(tmp_path))).is_empty()

    val = df.filter(pl.col("split") == "val")
    lines = training_progress_chart(val, "acc", perfect_score=1.0).axes[0].get_lines()
    plotted = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in lines}
    assert plotted["trained"] == ([0, 1, 2], [0.25, 0.75, 1.0])
    assert plotted["prompted"] == ([0, 2], [0.5, 0.5])  # a comparison model: its one value across the steps
    assert plotted["_nolegend_"] == ([0, 2], [1.0, 1.0])  # the perfect score

    keys = [BenchmarkModelKey("trained", "RL", split="val"), BenchmarkModelKey("prompted", "Prompted")]
    bars = percentage_comparison_bar_chart(df, "reward", models=keys).axes[0]
    drawn = [v for p in bars.patches for v in (p.get_x() + p.get_width() / 2, p.get_y(), p.get_height())]
    # percentages: RL's first step, what RL added, Prompted (flat: pytest.approx takes no nested tuples)
    assert drawn == pytest.approx([0, 0, 25.0, 0, 25.0, 75.0, 1, 0, 50.0])
    assert [t.get_text() for t in bars.get_xticklabels()] == ["RL", "Prompted"]
    assert "RL +75%" in [t.get_text() for t in bars.texts]
    with pytest.raises(ValueError, match="metric_missing"):
        training_progress_chart(df, "missing")


def test_pull_model_trajectories_copies_what_a_model_on_autorl_serve_logged(served, tiny_model, tmp_path):
    from autorl.utils.benchmarking.load_trajectories import load_trajectories
    from autorl.utils.benchmarking.pull_model_trajectories import pull_model_trajectories
    from tests.helpers.remote import TOKEN, trainable

    backend = art.RemoteBackend(served.url, api_key=TOKEN)
    model = trainable(tiny_model)

    async def program():
        await model.register(backend)
        await model.log([art.TrajectoryGroup([trajectory(0.25), trajectory(0.75)])], split="val")
        await pull_model_trajectories(model, art_path=str(tmp_path / "here"))
        return await load_trajectories(model.project, art_path=str(tmp_path / "here"))

    df = asyncio.run(program())
    backend.close()
    assert df.select("model", "split", "step", "reward").rows() == [
        (model.name, "val", 0, 0.25),
        (model.name, "val", 0, 0.75),
    ]
