"""The pipeline's cache keys, forced stages, atomic artifacts, statistics and run-level errors."""

import asyncio
import errno
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from autorl.agents.rollout import RolloutConfig
from autorl.errors import AutoRLError
from autorl.task import TaskSpec
from pipelines.artifacts import ArtifactStore
from pipelines.cli import app
from pipelines.config import STAGES, RunConfig
from pipelines.evaluation import answers
from pipelines.staged_run import forced_stages, stage_keys
from pipelines.stages import baseline
from pipelines.stats import mean_ci
from pipelines.steps.bookkeeping import check_unscored_steps
from pipelines.steps.groups import judged_groups

TASK = TaskSpec(description="Turn a casual sentence into formal business English")


def changed(before: dict, after: dict) -> set[str]:
    return {stage for stage in STAGES if before[stage] != after[stage]}


def test_a_setting_changes_only_the_stages_that_depend_on_it():
    base = stage_keys(TASK, RunConfig())
    assert stage_keys(TASK, RunConfig()) == base  # deterministic
    assert changed(base, stage_keys(TASK, RunConfig(train={"learning_rate": 1e-4}))) == {"train", "evaluate", "report"}
    assert changed(base, stage_keys(TASK, RunConfig(steps=3))) == {"evaluate", "report"}
    # the system prompt stage checks a generated prompt with the policy's answers to the inputs
    assert changed(base, stage_keys(TASK, RunConfig(model="/models/other"))) == set(STAGES) - {"inputs"}
    assert changed(base, stage_keys(TASK, RunConfig(num_inputs=12))) == set(STAGES)
    assert changed(base, stage_keys(TASK, RunConfig(system_prompt_check=0))) == set(STAGES) - {"inputs"}
    assert changed(base, stage_keys(TASK, RunConfig(home="/elsewhere", wandb=False))) == set()
    # every judged stage's scores depend on whether the judge explains them
    judged = set(STAGES) - {"inputs"}  # the planned warm-up judges its samples
    assert changed(base, stage_keys(TASK, RunConfig(judge_explanations="always"))) == judged


def test_the_preflight_settings_change_the_checks_and_the_report_only():
    base = stage_keys(TASK, RunConfig())
    # the plan decides the training aids from what the checks measured: the stages after them follow
    after_checks = {"preflight", "plan", "sft", "train", "evaluate", "report"}
    assert changed(base, stage_keys(TASK, RunConfig(audit_groups=2))) == after_checks
    assert changed(base, stage_keys(TASK, RunConfig(learnability_groups=6))) == after_checks
    # off, the learnability check drops no tied inputs, so training may take other inputs; nothing is planned
    assert changed(base, stage_keys(TASK, RunConfig(preflight="off"))) == after_checks
    assert changed(base, stage_keys(TASK, RunConfig(on_tied="warn"))) == {"train", "evaluate", "report"}
    assert changed(base, stage_keys(TASK, RunConfig(preflight="strict"))) == set()  # it only decides whether to stop
    # what step 1's groups depend on (the preflight stage samples them for the train stage) is in both keys; the
    # system prompt check samples a group per input for its worked examples
    assert changed(base, stage_keys(TASK, RunConfig(group_size=4))) == set(STAGES) - {"inputs"}
    assert changed(base, stage_keys(TASK, RunConfig(rollout={"temperature": 0.7}))) >= {"preflight", "train"}


def test_the_sft_key_covers_the_file_s_content_not_its_path_and_training_starts_from_it(tmp_path):
    line = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Good day."}]}\n'
    first, moved, edited = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    first.write_text(line)
    moved.write_text(line)
    edited.write_text(line.replace("Good day", "Hello"))
    base = stage_keys(TASK, RunConfig())
    warm = stage_keys(TASK, RunConfig(sft={"file": first}))
    after_sft = {"sft", "train", "evaluate", "report"}
    assert changed(base, warm) == {"plan", *after_sft}  # a warm-up given: the plan plans none
    assert stage_keys(TASK, RunConfig(sft={"file": moved})) == warm  # the same content elsewhere: all cached
    assert changed(warm, stage_keys(TASK, RunConfig(sft={"file": edited}))) == after_sft
    for setting in ({"epochs": 2}, {"batch_size": 4}, {"peak_lr": 1e-4}, {"chunk_size": 1}):
        assert changed(warm, stage_keys(TASK, RunConfig(sft={"file": first, **setting}))) == after_sft, setting
    assert changed(warm, stage_keys(TASK, RunConfig(sft={"file": first}, trainer={"lora_rank": 16}))) == after_sft
    assert changed(warm, stage_keys(TASK, RunConfig(sft={"file": first}, seed=1))) == set(STAGES)  # the shuffle too
    # RL's own settings leave the warm-up cached
    rl = stage_keys(TASK, RunConfig(sft={"file": first}, train={"learning_rate": 1e-4}))
    assert changed(warm, rl) == {"train", "evaluate", "report"}
    assert changed(warm, stage_keys(TASK, RunConfig(sft={"file": first}, steps=3))) == {"evaluate", "report"}


def test_force_recomputes_a_stage_and_everything_after_it():
    assert forced_stages([]) == set()
    assert forced_stages(["train"]) == {"train", "evaluate", "report"}
    assert forced_stages(["sft"]) == {"sft", "train", "evaluate", "report"}
    assert forced_stages(["all"]) == set(STAGES)
    with pytest.raises(AutoRLError, match="--force trian: no such stage"):
        forced_stages(["trian"])


def test_a_failed_write_leaves_the_previous_artifact_valid(tmp_path):
    store = ArtifactStore(tmp_path)
    with store.write("inputs", "k1", {}) as out:
        (out / "inputs.jsonl").write_text("old\n")
    with (
        pytest.raises(AutoRLError, match=r"disk full while writing .*inputs/k1; nothing was half-written"),
        store.write("inputs", "k1", {}) as out,
    ):
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
    assert (
        line
        == "error: run 'mine' exists with a different task; choose another --name, or pass --resume to replace its task"
    )


def test_task_file_with_unknown_field(tmp_path):
    task = tmp_path / "task.toml"
    task.write_text('description = "Summarise a news article"\nnum_input = 4\n')
    assert "num_input" in cli_error("run", str(task), "--home", str(tmp_path))


def test_run_help_documents_every_flag():
    result = CliRunner().invoke(app, ["run", "--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in ("--steps", "--group-size", "--groups-per-step", "--inputs", "--eval-samples", "--model", "--judge",
                 "--generator", "--learning-rate", "--max-tokens", "--seed", "--name", "--home", "--port",
                 "--wandb", "--no-wandb", "--force", "--resume", "--preflight", "--audit-groups",
                 "--learnability-groups"):  # fmt: skip
        line = next(line for line in result.output.splitlines() if flag in line)
        assert len(line.split(flag, 1)[1].strip()) > 10, f"{flag} has no help text"


def test_the_train_key_covers_every_setting_training_reads():
    from autorl.serving.config import ServerConfig

    base = stage_keys(TASK, RunConfig())
    downstream = {"train", "evaluate", "report"}
    # every TrainConfig and TrainerConfig field: tests/test_run_config.py
    # the LoRA's settings: the planned warm-up trains it too
    assert changed(base, stage_keys(TASK, RunConfig(trainer={"lora_rank": 16}))) == {"sft", *downstream}
    # the server's numerics: step 1's groups, which the preflight stage samples, too
    adapter = stage_keys(TASK, RunConfig(server=ServerConfig(lora_serving="adapter")))
    assert changed(base, adapter) == {"preflight", "plan", "sft", *downstream}
    assert changed(base, stage_keys(TASK, RunConfig(server=ServerConfig(port=8123, startup_timeout_s=5)))) == set()


def test_a_stage_key_covers_the_code_of_every_project_module_it_runs():
    from pipelines.artifacts import PROJECT_PACKAGES, imported_modules

    train = imported_modules("pipelines.stages.train", PROJECT_PACKAGES)
    # the loss and the trainer (imported inside functions), the judge, the stage context
    assert {
        "autorl.training.loss",
        "autorl.training.trainer",
        "autorl.config",
        "ruler.prompt",
        "pipelines.stage_context",
    } <= train
    assert "autorl.training.trainer" not in imported_modules("pipelines.stages.inputs", PROJECT_PACKAGES)


def test_editing_a_module_imported_through_others_changes_the_code_version(tmp_path, monkeypatch):
    import importlib

    from pipelines.artifacts import code_version

    package = tmp_path / "codekeypkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "stage.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import helper\nif TYPE_CHECKING:\n    from . import typing_only\n"
    )
    (package / "helper.py").write_text("def run():\n    from .sub.deep import value\n    return value\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "deep.py").write_text("value = 1\n")
    (package / "typing_only.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stage = importlib.import_module("codekeypkg.stage")
    packages = ("codekeypkg",)
    before = code_version(stage, packages)
    (package / "typing_only.py").write_text("x = 2\n")  # never runs: not part of the key
    assert code_version(stage, packages) == before
    (package / "sub" / "deep.py").write_text("value = 2\n")  # imported by a function of an imported module
    assert code_version(stage, packages) != before


def _evaluated(inputs_scored: dict[str, int], val_inputs: int = 6) -> dict:
    variants = {v: {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "inputs": n} for v, n in inputs_scored.items()}
    return {"val_inputs": val_inputs, "variants": variants}


def test_coverage_under_80_percent_is_a_warning_in_the_report():
    from pipelines.evaluation import coverage_warning
    from pipelines.stages.report import validation_table

    assert coverage_warning(_evaluated({"base": 5, "latest": 5})) is None  # 5/6 = 83%
    warning = coverage_warning(_evaluated({"base": 1, "latest": 6}))
    assert "base 1" in warning and "latest" not in warning and "too few inputs" in warning
    table = "\n".join(validation_table({**_evaluated({"base": 1, "latest": 6}), "judging": {"groups": 6, "failed": 5}}))
    assert "| base | 0 | 0.500 | [0.400, 0.600] | 1/6 |" in table
    assert "**Warning:**" in table and "6 groups: 5 could not be scored" in table


def test_runs_shows_base_latest_and_best_from_one_judging_with_their_input_counts(tmp_path):
    import json

    from pipelines.runs import runs_table

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    stages = {
        "baseline": {
            "summary": {"val_inputs": 6, "variants": {"base": {"mean": 0.801, "inputs": 5}}}
        },  # its own judging
        "preflight": {"summary": {"audit": {"verdict": "noise"}}},
        "evaluate": {"summary": _evaluated({"base": 2, "latest": 2}) | {"judging": {"groups": 6}}},
    }
    record = {"name": "r1", "status": "done", "task": {"description": "t"}, "stages": stages}
    (run / "run.json").write_text(json.dumps(record))
    table = runs_table(tmp_path)
    cells = {column.header: list(column.cells) for column in table.columns}
    assert cells["base val"] == ["0.500 (2/6)"]  # the evaluate stage's base, not the baseline stage's 0.801
    assert cells["latest val"] == ["0.500 (2/6)"] and cells["best val"] == ["0.500 (2/6)"]
    assert cells["judge"] == ["noise"]  # the verdict beside the figures


def test_the_stage_context_counts_what_the_judge_did():
    import asyncio
    from collections import Counter

    from autorl.trajectories import Trajectory, TrajectoryGroup
    from pipelines.stage_context import StageContext
    from ruler import TrajectoryScore

    class Judge:  # answers as RulerJudge does after two attempts with the second answer shortened; fails on "bad"
        async def score_group(self, message_lists, *, rubric, tools, task=None):
            assert task == TASK.description  # the judge is told the task
            if message_lists[0][0]["content"] == "bad":
                raise RuntimeError("judge down")
            return [
                TrajectoryScore(
                    trajectory_id=str(i),
                    explanation="",
                    score=i / 2,
                    metrics={"ruler_attempts": 2.0, "ruler_shortened": float(i == 2)},
                )
                for i in (1, 2)
            ]

    def group(text: str) -> TrajectoryGroup:
        answer = [{"role": "user", "content": text}, {"role": "assistant", "content": "a"}]
        return TrajectoryGroup([Trajectory(messages_and_choices=answer), Trajectory(messages_and_choices=answer)])

    ctx = StageContext(TASK, RunConfig(), None, {}, None, Judge(), None, None, None)
    scored = asyncio.run(ctx.score(group("good")))
    assert [t.reward for t in scored.trajectories] == [0.5, 1.0]
    assert asyncio.run(ctx.score(group("bad"))) is None
    assert ctx.judging == Counter(groups=2, failed=1, retries=1, shortened=1)
    assert ctx.calls["judge"] == 2


def test_steps_the_judge_scored_nothing_of_end_the_run_after_the_limit():
    def history(*scored: int) -> list[dict]:  # groups the judge scored per step; ties do not matter here
        return [{"step": i + 1, "groups": n, "groups_trained": 0} for i, n in enumerate(scored)]

    check_unscored_steps(history(2, 0, 0, 0), limit=3)  # three unscored steps: allowed
    check_unscored_steps(history(0, 0, 0, 0, 0), limit=0)  # 0: no limit
    check_unscored_steps(history(0, 0, 0, 1), limit=3)  # a scored step ends the streak
    check_unscored_steps(history(2, 2, 2, 2, 2), limit=3)  # every group tied (a learned task): not a failure
    with pytest.raises(AutoRLError) as error:
        check_unscored_steps(history(1, 0, 0, 0, 0), limit=3)
    assert str(error.value).startswith("in 4 training steps in a row the judge scored no group")
    assert "--max-unscored-steps" in str(error.value) and "\n" not in str(error.value)


def test_a_task_s_own_system_prompt_is_used_as_written_without_a_model_call(tmp_path):
    import asyncio
    from collections import Counter

    from rich.console import Console

    from pipelines.records import system_prompt as records
    from pipelines.stage_context import StageContext
    from pipelines.stages import system_prompt

    given = TASK.model_copy(update={"system_prompt": "You write formal business English."})
    keys = stage_keys(given, RunConfig())
    assert keys["system_prompt"] != stage_keys(TASK, RunConfig())["system_prompt"]
    assert changed(keys, stage_keys(given, RunConfig(generator="openai/gpt-4.1-mini"))) == {
        "inputs",
        "system_prompt",  # its inputs are upstream (a generated prompt is checked on them)
        "baseline",
        "preflight",
        "plan",
        "sft",
        "train",
        "evaluate",
        "report",
    }
    # the generator is not reachable and the policy is None: a call or a server start would fail
    config = RunConfig(generator="nobody@http://127.0.0.1:9/v1")
    ctx = StageContext(given, config, ArtifactStore(tmp_path), keys, None, None, None, tmp_path, Console(quiet=True))
    assert asyncio.run(system_prompt.run(ctx)) == {"chars": 34, "generator_calls": 0, "fallback": None, "check": None}
    assert records.load(ctx) == "You write formal business English." and ctx.calls == Counter()
    with pytest.raises(ValueError, match="must not be empty"):
        TaskSpec(description="x", system_prompt="  ")


def test_a_stage_s_judge_and_generator_requests_are_recorded_and_shown(tmp_path):
    """run.json keeps every request a stage made (seconds, tokens, how it ended) with a summary per model, and
    `autorl show` prints them: a slow or flaky judge is explained by the record."""
    import json

    from pipelines.staged_run import call_log
    from ruler.calls import CallRecord

    judge = [
        CallRecord("j", 4.0, 300, 60),
        CallRecord("j", 30.0, 300, 0, "timeout"),
        CallRecord("j", 2.0, 300, 50, "malformed_json"),
    ]
    logged = call_log(judge, [CallRecord("g", 1.5, 40, 20)])
    assert logged["judge"]["summary"]["j"] == {
        "calls": 3,
        "failed": {"malformed_json": 1, "timeout": 1},
        "seconds": 36.0,
        "median_s": 4.0,
        "max_s": 30.0,
        "prompt_tokens": 900,
        "completion_tokens": 110,
    }
    assert [r["outcome"] for r in logged["judge"]["log"]] == ["ok", "timeout", "malformed_json"]
    assert logged["generator"]["summary"]["g"]["calls"] == 1 and call_log([], []) == {}

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    entry = {"cached": False, "summary": {}, "seconds": 40.0, "model_calls": 4, "calls": logged}
    record = {"name": "r1", "status": "done", "task": {"description": "t"}, "keys": {"baseline": "k"}}
    (run / "run.json").write_text(json.dumps({**record, "stages": {"baseline": entry}}))
    shown = CliRunner().invoke(app, ["show", "r1", "--home", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "malformed_json 1, timeout 1" in shown.output and "900/110" in shown.output


TRAINED = {"baseline", "preflight", "plan", "sft", "train", "evaluate"}
"""The stages of a trained run that are cached, up to its report."""


@pytest.mark.parametrize(
    ("cached", "settings", "needed"),
    [
        (set(), {}, {"policy", "embedded"}),  # the README's run: both servers, started together
        (set(), {"judge": "m:judge"}, {"policy", "embedded"}),  # the embedded generator still writes the inputs
        ({"inputs", "system_prompt"}, {"judge": "m:judge"}, {"policy"}),
        ({"inputs", "system_prompt", *TRAINED}, {}, set()),  # only the report is left
        # new inputs for a trained run: the generator, and the policy to check the system prompt on them
        (TRAINED, {}, {"embedded", "policy"}),
        (TRAINED, {"system_prompt_check": 0}, {"embedded"}),  # the generator alone
    ],
)
def test_the_servers_a_run_starts_follow_the_stages_left_to_run(tmp_path, cached, settings, needed):
    from types import SimpleNamespace

    from pipelines.staged_run import servers_needed

    (tmp_path / "checkpoints" / "0002").mkdir(parents=True)
    for name in ("adapter_model.safetensors", "metrics.json"):
        (tmp_path / "checkpoints" / "0002" / name).write_text("{}")
    config = RunConfig(steps=2, **settings)
    ctx = SimpleNamespace(
        config=config,
        policy=SimpleNamespace(run_dir=tmp_path),
        has_artifact=lambda s: s in cached,
        artifact=lambda s: tmp_path / "artifacts" / s,  # no warm-up's manifest: RL's steps are the model's
    )
    assert servers_needed(TaskSpec(description="t"), config, set(), ctx) == needed
    assert servers_needed(TaskSpec(description="t"), config, {"inputs"}, ctx) >= {"embedded"}  # --force inputs


def test_a_steps_cost_counts_its_groups_made_earlier_by_the_preflight_stage(tmp_path):
    from collections import Counter

    from autorl.trajectories import TrajectoryGroup
    from pipelines.records.step_costs import GROUP_COST, group_cost, step_cost

    saved = tmp_path / "group_00.json"
    made = {"seconds": 7.5, "model_calls": {"policy": 4, "judge": 2}}
    saved.write_text(TrajectoryGroup([], metadata={GROUP_COST: made}).model_dump_json())
    assert group_cost(saved) == made
    (tmp_path / "old.json").write_text(TrajectoryGroup([]).model_dump_json())
    assert group_cost(tmp_path / "old.json") is None  # saved before groups recorded their cost
    cost = step_cost(3.0, Counter(policy=4, judge=1), [made, {"seconds": 5.0, "model_calls": {"policy": 4}}])
    assert cost == {"seconds": 10.5, "model_calls": {"policy": 12, "judge": 3}}  # the longest earlier group's time
    assert step_cost(2.0, Counter(), []) == {"seconds": 2.0, "model_calls": {}}


def test_a_start_in_the_background_hands_back_its_result_or_error_on_a_daemon_thread():
    """The embedded server's start beside the policy's (Policy.start): a failed policy start waits for nothing."""
    import asyncio
    import threading

    from autorl.threads import in_daemon_thread

    def fail() -> None:
        raise ValueError("no such model")

    def where() -> bool:
        return threading.current_thread().daemon

    async def main() -> None:
        assert await in_daemon_thread(where) is True
        with pytest.raises(ValueError, match="no such model"):
            await in_daemon_thread(fail)

    asyncio.run(main())


def test_the_sign_flip_test_of_a_paired_gain_is_exact_and_passes_an_unchanged_model_rarely():
    from pipelines.stats import sign_flip_p

    assert sign_flip_p([1.0] * 5) == 1 / 32  # only the observed signs reach the observed mean
    assert sign_flip_p([0.5, -0.5] * 4) > 0.5 and sign_flip_p([]) == 1.0
    assert sign_flip_p([0.2] * 20) == 1 / 100_001  # sampled above 16 differences: never 0
    # an unchanged model: per-input differences symmetric around 0 pass at p < 0.01 at most 1% of the time
    rng = np.random.default_rng(1)
    passes = [sign_flip_p(list(rng.normal(0, 0.4, 16))) < 0.01 for _ in range(400)]
    assert sum(passes) <= 0.01 * len(passes) + 3  # 4 of 400 is 1%; a few more for the sample's own spread


def test_held_out_answers_choose_their_tools_themselves_under_tool_choice_required():
    """`--tool-choice required` is a training aid: the baseline's and evaluate's answers are asked with "auto"."""
    asked = []

    async def answer(prompt, text, config, name):
        asked.append(config.rollout.tool_choice)
        return SimpleNamespace(metadata={})

    config = RunConfig(rollout=RolloutConfig(tool_choice="required"), eval_samples=2)
    ctx = SimpleNamespace(config=config, policy=SimpleNamespace(answer=answer))

    async def both():
        return await asyncio.gather(*answers(ctx, "prompt", "input", "policy@0", "base"))

    assert [t.metadata["variant"] for t in asyncio.run(both())] == ["base", "base"] and asked == ["auto", "auto"]
    assert config.rollout.tool_choice == "required"  # the run's own config is left as it is
    unaided = RunConfig(eval_samples=2)
    assert baseline.settings(TaskSpec(description="t"), config) == baseline.settings(TaskSpec(description="t"), unaided)


@pytest.mark.parametrize(
    ("choice", "share", "asked"),
    [
        ("required", 1.0, ["required"] * 4),
        ("required", 0.5, ["required", "required", "auto", "auto"]),
        ("required", 0.1, ["required", "auto", "auto", "auto"]),  # a share above 0 forces one at least
        ("required", 0.0, ["auto"] * 4),
        ("auto", 1.0, ["auto"] * 4),
    ],
)
def test_a_training_group_forces_the_first_call_of_its_required_share_of_answers(choice, share, asked):
    """`rollout.required_share`: part of each group calls because it must, the rest as the model chooses, so the
    group's advantages weigh calling against not calling (a call forced in every answer earns none)."""
    seen = []

    def answer(prompt, text, config, name):
        seen.append(config.rollout.tool_choice)
        done = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(metadata={}))
        return done

    async def start():
        pass

    async def gather_judged(groups, desc, then):
        return groups

    config = RunConfig(rollout=RolloutConfig(tool_choice=choice, required_share=share), group_size=4)
    ctx = SimpleNamespace(
        config=config, policy=SimpleNamespace(answer=answer, start=start), gather_judged=gather_judged
    )
    asyncio.run(judged_groups(ctx, "prompt", ["input"], [None], "step 1"))
    assert seen == asked
