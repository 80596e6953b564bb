"""Every training setting reaches a run once: `autorl run` flags, a task file's [train]/[trainer] tables, defaults."""

from __future__ import annotations

import json
import types
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from autorl.agents.rollout import RolloutConfig
from autorl.backends.cluster.config import ClusterConfig
from autorl.config import TrainConfig, TrainerConfig
from autorl.errors import AutoRLError
from autorl.task import RUN_SETTINGS, TaskSpec, load_task
from pipelines.cli import RUN_FLAGS, app
from pipelines.config import RunConfig
from pipelines.policy import Policy
from pipelines.staged_run import stage_keys
from pipelines.stages.train import step_config
from tests.helpers.cli import TASK, run_error_line
from tests.helpers.docs import DOCS, marked_block

REPO = Path(__file__).resolve().parents[1]
SECTIONS = {"train": TrainConfig, "trainer": TrainerConfig, "rollout": RolloutConfig}
SET_APART = {("train", "truncated_importance_sampling")}
"""Fields whose `other_value` a config refuses beside another field's (truncated_importance_sampling beside
importance_sampling_correction): `test_every_train_and_trainer_flag_sets_its_field` sets them in a run of their own."""


def other_value(model: type[BaseModel], name: str) -> Any:
    """A valid value of the field that differs from its default."""
    annotation = model.model_fields[name].annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    default = model.model_fields[name].get_default(call_default_factory=True)
    if get_origin(annotation) is Literal:
        return next(choice for choice in get_args(annotation) if choice != default)
    if default is None and annotation is int:
        return 64
    if default is None and annotation is float:  # an optional setting that is off (None), on at a value > 0
        return 1.5
    if isinstance(default, bool):
        return not default
    if isinstance(default, list):
        return default[:2]
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default + 0.5 if default < 0.5 else default / 2
    raise AssertionError(f"no other value known for {model.__name__}.{name} = {default!r}")


def flag_args(path: str, value: Any) -> list[str]:
    flag = next(flag for flag in RUN_FLAGS if flag.path == path).names[0]
    if isinstance(value, bool):
        return [flag if value else f"--no-{flag[2:]}"]
    return [flag, ",".join(value) if isinstance(value, list) else str(value)]


def test_every_train_trainer_and_rollout_field_has_a_flag_with_its_docstring_and_default():
    paths = {flag.path for flag in RUN_FLAGS}
    for section, model in SECTIONS.items():
        assert {f"{section}.{name}" for name in model.model_fields} <= paths
    output = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "250"}).output
    text = " ".join(output.replace("│", " ").split())
    for flag in RUN_FLAGS:
        assert flag.names[0] in output and flag.help, flag.path
        assert " ".join(flag.help.split()[:4]) in text, flag.path  # the docstring's first sentence
    assert "AdamW learning rate of the LoRA weights. [default: 0.0003]" in text
    assert "--lora-rank" in output and "[default: 8]" in text and "--lr" in output
    assert "Per loss: gspo: 0.0003, cispo: 1.0." in text  # epsilon's loss defaults
    names = [name for flag in RUN_FLAGS for name in flag.names]
    assert len(names) == len(set(names)) and "--trainer-seed" in names  # TrainerConfig.seed: --seed is taken


def test_no_flag_gives_the_default_config(run):
    _, config = run(TASK)
    assert config == RunConfig()
    assert config.train.model_fields_set == set() and config.trainer.model_fields_set == set()


def test_every_train_and_trainer_flag_sets_its_field(run):
    wanted = {
        (section, name): other_value(model, name) for section, model in SECTIONS.items() for name in model.model_fields
    }
    for apart in (False, True):
        fields = {field: value for field, value in wanted.items() if (field in SET_APART) == apart}
        args = [arg for (section, name), value in fields.items() for arg in flag_args(f"{section}.{name}", value)]
        _, config = run(TASK, *args)
        for (section, name), value in fields.items():
            assert getattr(getattr(config, section), name) == value, f"{section}.{name}"


def test_run_flags_take_their_defaults_from_run_config(run, tmp_path):
    _, config = run(TASK, "--steps", "3", "--group-size", "6", "--inputs", "9", "--lr", "1e-4", "--max-tokens", "64",
                    "--port", "8123", "--force", "train,report", "--no-wandb", "--inputs-file", "in.jsonl")  # fmt: skip
    assert (config.steps, config.group_size, config.num_inputs, config.train.learning_rate) == (3, 6, 9, 1e-4)
    assert (config.rollout.max_tokens, config.server.port, config.force, config.wandb) == (
        64,
        8123,
        ["train", "report"],
        False,
    )
    assert config.inputs_file == Path("in.jsonl")
    assert config.model_dump(include={"groups_per_step", "eval_samples", "model", "judge", "generator", "seed"}) == (
        RunConfig().model_dump(include={"groups_per_step", "eval_samples", "model", "judge", "generator", "seed"})
    )
    _, config = run(TASK, env={"AUTORL_HOME": str(tmp_path)})
    assert config.home == tmp_path


def test_a_loss_keeps_its_defaults_for_the_flags_not_given(run):
    _, config = run(TASK, "--loss", "gspo")
    assert (config.train.epsilon, config.train.epsilon_high) == (3e-4, 4e-4)
    _, config = run(TASK, "--loss", "gspo", "--epsilon", "0.1")
    assert (config.train.epsilon, config.train.epsilon_high) == (0.1, 4e-4)
    _, config = run(TASK, "--loss", "cispo", "--lr", "1e-4")
    assert config.train == TrainConfig(loss="cispo", learning_rate=1e-4)


def test_a_bad_flag_value_names_the_flag():
    assert run_error_line(TASK, "--epsilon", "-1") == "error: --epsilon: Input should be greater than or equal to 0"
    assert run_error_line(TASK, "--lora-dropout", "1.5") == "error: --lora-dropout: Input should be less than 1"
    assert (
        run_error_line(TASK, "--max-tokens", "0") == "error: --max-tokens: Input should be greater than or equal to 1"
    )
    assert run_error_line(TASK, "--group-size", "1").startswith("error: --group-size: ")


def task_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "task.toml"
    path.write_text(f'description = "{TASK}"\n{text}')
    return path


def test_flag_over_task_table_over_default(run, tmp_path):
    path = task_file(
        tmp_path,
        '[train]\nloss = "gspo"\nlearning_rate = 5e-5\n[trainer]\nlora_rank = 16\ntarget_modules = ["q_proj"]\n',
    )
    _, config = run(str(path))
    assert (config.train.loss, config.train.learning_rate, config.train.epsilon) == ("gspo", 5e-5, 3e-4)
    assert (config.trainer.lora_rank, config.trainer.target_modules, config.trainer.lora_alpha) == (16, ["q_proj"], 16)
    _, config = run(str(path), "--lr", "1e-4", "--epsilon", "0.1", "--lora-rank", "4")
    assert (config.train.loss, config.train.learning_rate, config.train.epsilon, config.train.epsilon_high) == (
        "gspo", 1e-4, 0.1, 4e-4,
    )  # fmt: skip
    assert (config.trainer.lora_rank, config.trainer.target_modules) == (4, ["q_proj"])
    _, config = run(str(path), "--loss", "grpo")
    assert config.train == TrainConfig(loss="grpo", learning_rate=5e-5)  # the table's loss defaults go with it


def test_inputs_file_flag_over_task_file(run, tmp_path):
    path = task_file(tmp_path, 'inputs_file = "mine.jsonl"\n')
    assert run(str(path))[1].inputs_file == tmp_path / "mine.jsonl"
    assert run(str(path), "--inputs-file", "/data/other.jsonl")[1].inputs_file == Path("/data/other.jsonl")


def test_an_unknown_or_bad_task_table_key_is_one_line(tmp_path):
    line = run_error_line(str(task_file(tmp_path, "[train]\nlr = 1e-4\n")))
    assert line.startswith(
        "error: the task's [train] table: unknown field 'train.lr' (known fields: learning_rate, loss,"
    )
    line = run_error_line(str(task_file(tmp_path, "[trainer]\nlora_rank = 0\n")))
    assert (
        line
        == "error: the task's [trainer] table: field 'trainer.lora_rank': Input should be greater than or equal to 1 (got 0)"
    )
    with pytest.raises(AutoRLError, match=r"\[trainer\] table: unknown field 'trainer.rank'"):
        RunConfig.for_task(TaskSpec(description="x", trainer={"rank": 4}))


def test_the_docs_example_of_the_tables_loads(tmp_path):
    example = marked_block(DOCS / "settings.md", "tests/test_run_config.py")
    config = RunConfig.for_task(load_task(task_file(tmp_path, example.split("\n", 1)[1])))
    assert (config.train.loss, config.train.epsilon, config.trainer.lora_rank) == ("gspo", 3e-4, 16)


@pytest.mark.parametrize("section", ["train", "trainer"])
def test_the_train_key_changes_with_every_train_and_trainer_field(section):
    task = TaskSpec(description=TASK)
    base = stage_keys(task, RunConfig())
    model = SECTIONS[section]
    for name in model.model_fields:
        keys = stage_keys(task, RunConfig(**{section: {name: other_value(model, name)}}))
        # the planned warm-up trains the same LoRA with the same trainer
        after = {"train", "evaluate", "report"} | ({"sft"} if section == "trainer" else set())
        assert {stage for stage in keys if keys[stage] != base[stage]} == after, name


def test_the_policy_is_built_with_the_runs_trainer_config(tmp_path):
    config = RunConfig(trainer={"lora_rank": 4, "target_modules": ["q_proj"]})
    policy = Policy(config, tmp_path, "key", Counter(), TaskSpec(description="t"), tmp_path / "logs")
    assert policy.model.trainer == config.trainer


def test_changing_the_tables_or_the_inputs_file_keeps_the_run_name(tmp_path):
    from pipelines.staged_run import _open_record

    first = TaskSpec(description=TASK).model_dump(mode="json", exclude=RUN_SETTINGS)  # the task as a record keeps it
    run_dir = tmp_path / "runs" / "mine"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"name": "mine", "task": first, "wandb_id": "x"}))
    changed = TaskSpec(
        description=TASK, train={"loss": "gspo"}, trainer={"lora_rank": 4}, inputs_file=tmp_path / "in.jsonl"
    )
    record = _open_record(run_dir, "mine", changed, RunConfig.for_task(changed))
    assert record["task"] == first  # the settings are in the record's config
    assert record["config"]["train"]["loss"] == "gspo" and record["config"]["trainer"]["lora_rank"] == 4


def test_max_turns_flag_overrides_the_tasks(run):
    tool_task = str(Path(__file__).resolve().parents[1] / "pipelines" / "tasks" / "unit_conversion_tool.toml")
    assert run(tool_task)[0].max_turns == 4
    task, _ = run(tool_task, "--max-turns", "7")
    assert task.max_turns == 7 and task.agent_settings()["max_turns"] == 7


def test_the_overlong_penalty_counts_up_to_the_runs_max_tokens_unless_set(run):
    _, config = run(TASK, "--overlong-buffer", "16", "--max-tokens", "64")
    assert (step_config(config).overlong_buffer, step_config(config).max_completion_tokens) == (16, 64)
    _, config = run(TASK, "--overlong-buffer", "16", "--max-completion-tokens", "100")
    assert step_config(config).max_completion_tokens == 100


def test_the_cluster_comes_from_flags_over_the_task_table(run, tmp_path):
    path = task_file(tmp_path, '[cluster]\nray = "auto"\nreplicas = 4\nreplica_cpus = 2\n')
    assert run(str(path))[1].cluster == ClusterConfig(ray="auto", replicas=4, replica_cpus=2)
    _, config = run(str(path), "--ray", "local", "--replicas", "2", "--trainer-cpus", "3", "--trainer-workers", "2")
    assert config.cluster == ClusterConfig(ray="local", replicas=2, replica_cpus=2, trainer_cpus=3, trainer_workers=2)
    assert run(TASK)[1].cluster.ray is None  # the default: no Ray
    assert run_error_line(TASK, "--trainer-workers", "2").endswith(
        "trainer_workers > 1 trains on a Ray cluster: give ray too (--ray local, auto or an address)"
    )
    assert run_error_line(TASK, "--ray", "ray://head:10001").startswith("error: --ray: Ray Client addresses (ray://)")


def test_a_task_file_cannot_send_a_run_off_this_machine_without_the_same_flag(run, tmp_path):
    remote = task_file(tmp_path, '[cluster]\nray = "203.0.113.5:6379"\n')
    assert run_error_line(str(remote)) == (
        "error: the task's [cluster] ray sends the run to the Ray cluster at '203.0.113.5:6379', off this "
        "machine; a task file cannot do that alone: pass --ray 203.0.113.5:6379 too if you mean it"
    )
    assert run(str(remote), "--ray", "203.0.113.5:6379")[1].cluster.ray == "203.0.113.5:6379"  # the user's own word
    assert run_error_line(str(remote), "--ray", "198.51.100.7:6379").startswith("error: the task's [cluster] ray sends")
    for here in ("local", "auto", "127.0.0.1:6379", "localhost:6379", "[::1]:6379"):
        path = task_file(tmp_path, f'[cluster]\nray = "{here}"\n')
        assert run(str(path))[1].cluster.ray == here
    # an `autorl serve` elsewhere would get the run and the AUTORL_TOKEN: the same rule
    served = task_file(tmp_path, 'backend = "https://gpu.example.com:7999"\n')
    assert run_error_line(str(served)) == (
        "error: the task's backend sends the run to the `autorl serve` at 'https://gpu.example.com:7999', "
        "off this machine; a task file cannot do that alone: pass --backend https://gpu.example.com:7999 too if "
        "you mean it"
    )
    assert run(str(served), "--backend", "https://gpu.example.com:7999")[1].backend.startswith("https://gpu")
    for here in ("http://127.0.0.1:7999", "http://localhost:7999", "http://[::1]:7999"):
        path = task_file(tmp_path, f'backend = "{here}"\n')
        assert run(str(path))[1].backend == here


def test_the_old_place_of_a_task_files_backend_still_works_with_one_warning(run, tmp_path, caplog):
    """`[cluster] backend` (before the `[cluster]` table was the Ray cluster's alone) is the top-level `backend`."""
    old = task_file(tmp_path, '[cluster]\nbackend = "http://127.0.0.1:7999"\nreplicas = 2\n')
    with caplog.at_level("WARNING", logger="autorl"):
        _, config = run(str(old))
    assert config.backend == "http://127.0.0.1:7999" and config.cluster == ClusterConfig(replicas=2)
    (warning,) = [r.getMessage() for r in caplog.records if "backend" in r.getMessage()]
    assert "`[cluster] backend` is deprecated; write `backend = ...` above the tables" in warning
    assert run(str(old), "--backend", "http://127.0.0.1:8000")[1].backend == "http://127.0.0.1:8000"  # a flag wins
    both = task_file(tmp_path, 'backend = "http://127.0.0.1:7999"\n[cluster]\nbackend = "http://127.0.0.1:8000"\n')
    assert "backend and [cluster] backend differ" in run_error_line(str(both))
    off = task_file(tmp_path, '[cluster]\nbackend = "https://gpu.example.com:7999"\n')
    assert run_error_line(str(off)).startswith("error: the task's backend sends the run to the `autorl serve`")


def test_a_backend_is_a_url_and_not_beside_ray(run):
    _, config = run(TASK, "--backend", "http://gpu-box:7999")
    assert (config.backend, config.cluster) == ("http://gpu-box:7999", ClusterConfig())
    assert run_error_line(TASK, "--backend", "gpu-box:7999").startswith(
        "error: --backend: 'gpu-box:7999': expected the URL"
    )
    line = run_error_line(TASK, "--backend", "http://gpu-box:7999", "--ray", "local")
    assert line == "error: --ray and --backend name two places to train: give one", line


def test_where_a_run_is_served_changes_no_cache_key():
    task = TaskSpec(description=TASK)
    cluster = ClusterConfig(ray="local", replicas=3, replica_cpus=2, trainer_cpus=2)
    assert stage_keys(task, RunConfig(cluster=cluster)) == stage_keys(task, RunConfig())
    assert stage_keys(task, RunConfig(backend="http://gpu-box:7999")) == stage_keys(task, RunConfig())


def test_report_to_takes_a_list_and_no_wandb_stays_its_alias(run):
    _, config = run(TASK, "--report-to", "mlflow,tensorboard", "--report-to", "wandb", "--no-wandb")
    assert config.report_to == ["mlflow", "tensorboard", "wandb"] and config.trackers() == ["mlflow", "tensorboard"]
    assert run(TASK)[1].trackers() == ["wandb"]
    assert "--report-to" in run_error_line(TASK, "--report-to", "comet")


def test_async_sets_the_pipelines_staleness_bound_and_enters_the_train_key_only_above_0(run):
    _, config = run(TASK, "--async", "2")
    assert config.max_steps_off_policy == 2 and run(TASK)[1].max_steps_off_policy == 0
    task = TaskSpec(description=TASK)
    base = stage_keys(task, RunConfig())
    assert stage_keys(task, RunConfig(max_steps_off_policy=0)) == base  # the synchronous runs keep their keys
    keys = stage_keys(task, RunConfig(max_steps_off_policy=1))
    assert {stage for stage in keys if keys[stage] != base[stage]} == {"train", "evaluate", "report"}
    corrected = stage_keys(task, RunConfig(train={"importance_sampling_correction": False}))
    assert corrected == base  # a field added later enters the key only away from its default
