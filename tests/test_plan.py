"""The plan: the training aids a run takes, decided from the base model's judged answers before training (forced
first calls and strict tools for a task whose base never calls, a warm-up where no base answer succeeds), each
with its evidence; a setting the user gave is kept; the stages after it run under the plan, and its sft stage
warms up on the policy's own successes (a scripted policy, a program judge, the real stage code)."""

from __future__ import annotations

import asyncio
import json

from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from rich.console import Console

from autorl.task import TaskSpec
from autorl.tracking import Tracker
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.config import RunConfig
from pipelines.records import plan as records
from pipelines.records import preflight as preflight_records
from pipelines.stage_context import StageContext
from pipelines.stages import plan, report, sft
from ruler import FunctionJudge
from tests.helpers.pipeline import TASK, TRAIN, ScriptedPolicy, upstream_artifacts

NEVER_CALLS = {"answers": 32, "success_rate": 0.0, "call_rate": 0.0, "unparsed_rate": 0.0, "cut_rate": 0.0}
"""The directory task's base model: no answer calls the tool, none succeeds."""


def test_a_task_whose_base_never_calls_gets_forced_calls_strict_tools_and_a_warm_up():
    decided = plan.decide(NEVER_CALLS, RunConfig(), tools=True)
    assert decided["updates"] == {
        "rollout": {"tool_choice": "required", "strict_tools": True},
        "sft": {"bootstrap": plan.WARM_UP_INPUTS},
    }
    lines = decided["lines"]
    assert lines[0].startswith("0% of 32 base answers call a tool (under 25%)") and "--tool-choice required" in lines[0]
    assert lines[1] == "calls are forced: --strict-tools"
    assert "0% of 32 base answers succeed" in lines[2] and lines[2].endswith(f"--sft-bootstrap {plan.WARM_UP_INPUTS}")
    planned = records.planned(RunConfig(), decided)
    assert planned.rollout.tool_choice == "required" and planned.rollout.strict_tools
    assert planned.sft.bootstrap == plan.WARM_UP_INPUTS and planned.group_size == RunConfig().group_size


def test_a_base_that_calls_and_succeeds_needs_no_aid_and_a_task_without_tools_none_of_the_tool_aids():
    calls = {**NEVER_CALLS, "call_rate": 0.5, "success_rate": 0.1}
    assert plan.decide(calls, RunConfig(), tools=True)["updates"] == {}
    assert plan.decide(NEVER_CALLS, RunConfig(), tools=False)["updates"] == {"sft": {"bootstrap": plan.WARM_UP_INPUTS}}
    unparsed = {**calls, "unparsed_rate": 0.5}  # calls begun that never ran: the grammar holds them
    assert plan.decide(unparsed, RunConfig(), tools=True)["updates"] == {"rollout": {"strict_tools": True}}
    assert plan.decide(None, RunConfig(), tools=True) == {
        "updates": {},
        "lines": ["nothing measured (--preflight off): the defaults, no aid"],
    }


def test_too_few_answers_plan_nothing():
    decided = plan.decide({**NEVER_CALLS, "answers": 2}, RunConfig(), tools=True)
    assert decided == {
        "updates": {},
        "lines": ["only 2 base answers were judged before training (under 16): the defaults"],
    }


def test_no_warm_up_is_planned_on_a_judge_the_audit_found_unreliable():
    decided = plan.decide({**NEVER_CALLS, "judge": "noisy"}, RunConfig(), tools=False)
    assert decided["updates"] == {} and decided["lines"][-1].endswith(
        "no warm-up: the judge is not reliable (noisy), its best answers are noise"
    )


def test_a_setting_the_user_gave_wins_and_the_plan_says_so():
    config = RunConfig(rollout={"tool_choice": "auto"}, sft={"bootstrap": 0})
    decided = plan.decide(NEVER_CALLS, config, tools=True)
    assert decided["updates"] == {"rollout": {"strict_tools": True}}
    assert decided["lines"][0].endswith("you set --tool-choice: kept")
    assert decided["lines"][-1].endswith("you set the warm-up: kept")
    assert plan.settings(TASK, config) != plan.settings(TASK, RunConfig())  # what was given is in the key


def _assistant(content: str, finish_reason: str = "stop") -> Choice:
    return Choice(
        index=0, finish_reason=finish_reason, message=ChatCompletionMessage(role="assistant", content=content)
    )


def test_answers_cut_at_max_tokens_are_said_and_the_cap_kept():
    decided = plan.decide({**NEVER_CALLS, "success_rate": 0.1, "cut_rate": 0.4}, RunConfig(), tools=False)
    assert decided["updates"] == {} and decided["lines"][0].startswith(
        "40% of base answers were cut at --max-tokens 128"
    )


def test_the_evidence_is_read_from_the_answers():
    user = {"role": "user", "content": "q"}
    called = Trajectory(
        messages_and_choices=[
            user,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "content": "42", "tool_call_id": "1"},
            _assistant("42"),
        ],
        reward=1.0,
    )
    unparsed = Trajectory(messages_and_choices=[user, _assistant('<tool_call>{"name": "f", "argu')], reward=0.0)
    cut = Trajectory(messages_and_choices=[user, _assistant("a long answer", "length")], reward=0.0)
    plain = Trajectory(messages_and_choices=[user, _assistant("no")], reward=0.25)
    seen = plan.evidence([TrajectoryGroup([called, unparsed]), TrajectoryGroup([cut, plain])])
    assert seen == {"answers": 4, "success_rate": 0.25, "call_rate": 0.25, "unparsed_rate": 0.5, "cut_rate": 0.25}


class SometimesRight(ScriptedPolicy):
    """Answers "Paris" once in eight answers, "no idea" otherwise."""

    def __init__(self, run_dir):
        super().__init__(run_dir, ["no idea"] * 7 + ["Paris"])


def test_a_run_whose_base_never_succeeds_plans_a_warm_up_and_its_sft_stage_takes_it(tiny_model, tmp_path):
    task = TaskSpec(description=TASK.description, system_prompt=TASK.system_prompt)
    config = RunConfig(
        model=str(tiny_model), group_size=2, groups_per_step=1, steps=1, trainer={"dtype": "float32"},
        sft={"batch_size": 8, "chunk_size": 4},
    )  # fmt: skip
    keys, store = upstream_artifacts(tmp_path, config, task)
    base_answers = [  # the preflight sample: no answer succeeds
        TrajectoryGroup(
            Trajectory(
                messages_and_choices=[{"role": "user", "content": text}, {"role": "assistant", "content": "no"}],
                reward=0.0,
                metadata={"input": text},
            )
            for _ in range(8)
        )
        for text in TRAIN[:4]
    ]
    with store.write(preflight_records.NAME, keys[preflight_records.NAME], {}) as out:
        (out / preflight_records.FILE).write_text(json.dumps({"audit": {"verdict": "reliable"}, "learnability": {}}))
        (out / preflight_records.SAMPLE).write_text("".join(g.model_dump_json() + "\n" for g in base_answers))
    console = Console(record=True, width=300)
    judge = FunctionJudge(lambda messages: float(messages[-1]["content"] == "Paris"))
    policy = SometimesRight(tmp_path / "train")
    tracker = Tracker([], tmp_path / "run", "run", "id")
    ctx = StageContext(task, config, store, keys, policy, judge, tracker, tmp_path / "run", console)

    summary = asyncio.run(plan.run(ctx))
    plan.gate(ctx, summary)
    assert ctx.config.sft.bootstrap == plan.WARM_UP_INPUTS and config.sft.bootstrap == 0  # the run's, planned
    assert records.load(ctx)["evidence"]["success_rate"] == 0.0
    said = " ".join(console.export_text().split())
    assert "plan: 0% of 32 base answers succeed (score >= 0.5), so every group would tie at the bottom: " in said

    assert not sft.is_done(ctx)
    warmed = asyncio.run(sft.run(ctx))
    # 32 groups of 2 answers, one answer in 8 "Paris": a group in 4 has a success, and only those are kept
    assert warmed["bootstrap"] == {"answered": 64, "groups": plan.WARM_UP_INPUTS, "kept": 8}
    assert warmed["conversations"] == 8 and warmed["steps"] == 1
    assert records.section(records.load(ctx))[0] == "## The plan"


def test_a_planned_no_warm_up_is_an_empty_sft_artifact(tmp_path):
    config = RunConfig(group_size=2, groups_per_step=1, steps=1)
    keys, store = upstream_artifacts(tmp_path, config)
    console = Console(record=True, width=300)
    tracker = Tracker([], tmp_path / "run", "run", "id")
    ctx = StageContext(
        TASK, config, store, keys, ScriptedPolicy(tmp_path / "train", ["a"]), None, tracker, tmp_path / "run", console
    )
    assert asyncio.run(sft.run(ctx)) == {"steps": 0, "conversations": 0, "none": "the plan called for none"}
    assert sft.is_done(ctx) and "warm-up: the plan called for none" in console.export_text()
    assert report.sft_section(ctx) == []


def test_a_recorded_run_is_read_under_its_plan(tmp_path):
    from collections import Counter

    from pipelines.run_view import RunView

    record = {
        "name": "mine",
        "task": TASK.model_dump(mode="json"),
        "config": RunConfig().model_dump(mode="json"),
        "keys": {"train": "t", "plan": "p"},
    }
    (tmp_path / "runs" / "mine").mkdir(parents=True)
    (tmp_path / "runs" / "mine" / "run.json").write_text(json.dumps(record))
    (tmp_path / "artifacts" / "plan" / "p").mkdir(parents=True)
    decided = plan.decide(NEVER_CALLS, RunConfig(), tools=True)
    (tmp_path / "artifacts" / "plan" / "p" / records.FILE).write_text(json.dumps(decided))
    view = RunView(tmp_path, "mine", Counter(), connect=False)  # `autorl chat` offers the tools as training did
    assert view.config.rollout.strict_tools and view.config.rollout.tool_choice == "required"
