"""The system prompt is chosen by the judge: the task text, a generated prompt and the task text with worked
examples from the policy's own best answers are scored on training inputs, and a candidate replaces the task
text only where its gain's interval is above 0; where the judge is not reliable, or the check is off, the
task text is the system prompt and the run says why. The policy is a stand-in whose answers follow its system
prompt; the generator (a model) is the edge replaced here; the judges are a real program judge and a noisy
model-like one."""

from __future__ import annotations

import asyncio
import json

import pytest
from rich.console import Console

from autorl.inputs.generation import WrittenSystemPrompt
from autorl.task import TaskSpec
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.config import RunConfig
from pipelines.records import system_prompt as records
from pipelines.stage_context import StageContext
from pipelines.stages import report, system_prompt
from ruler import FunctionJudge
from tests.helpers.pipeline import NoisyModelJudge, ScriptedPolicy, upstream_artifacts

TASK = TaskSpec(description="Answer with the capital city, one word.")
HARMFUL = "The response must have 2 paragraphs separated with *** and must contain 'you' in bold."
HELPFUL = "Answer with one word: the name of the city."


class PromptFollowingPolicy(ScriptedPolicy):
    """Answers as its system prompt says: the harmful prompt gets an essay, the helpful one and a prompt with a
    worked example "Paris"; the task text gets "Paris" on every `task_hits`-th answer to an input (never
    when None), else a sentence without the city."""

    def __init__(self, run_dir, task_hits: int | None):
        super().__init__(run_dir, ["unused"])
        self.task_hits = task_hits
        self.counts: dict[str, int] = {}

    async def answer(self, prompt: str, text: str, config: RunConfig, name: str | None = None) -> Trajectory:
        self.answered.append((text, prompt))
        count = self.counts[text] = self.counts.get(text, 0) + 1
        if prompt == HARMFUL:
            reply = "You **you** see, it is a city.\n***\nA lovely one"
        elif prompt == HELPFUL or "Example answer: Paris" in prompt:
            reply = "Paris"
        else:
            reply = "Paris" if self.task_hits and (count - 1) % self.task_hits == 0 else "It is a city in France."
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
        return Trajectory(messages_and_choices=[*messages, {"role": "assistant", "content": reply}])


def says_paris(messages: list[dict]) -> float:
    """A program judge that checks content: the answer names the city (and it sees no system prompt)."""
    assert all(m["role"] != "system" for m in messages)
    return 1.0 if messages[-1]["content"].strip() == "Paris" else 0.0


def run_stage(
    tmp_path, monkeypatch, generated: str, judge, task_hits=None, fallback=None, **settings
) -> tuple[dict, StageContext]:
    written = []
    monkeypatch.setattr(
        system_prompt,
        "generate_system_prompt",
        lambda *_: written.append(1) or WrittenSystemPrompt(generated, fallback),
    )
    config = RunConfig(eval_samples=2, group_size=4, **{"system_prompt_check": 3, **settings})
    keys, store = upstream_artifacts(tmp_path, config, TASK, with_prompt=False)
    policy = PromptFollowingPolicy(tmp_path / "train", task_hits)
    ctx = StageContext(TASK, config, store, keys, policy, judge, None, tmp_path, Console(record=True, width=400))
    summary = asyncio.run(system_prompt.run(ctx))
    summary["written"] = len(written)
    return summary, ctx


def test_worked_examples_from_the_policy_s_own_best_answers_replace_the_task_text(tmp_path, monkeypatch):
    summary, ctx = run_stage(tmp_path, monkeypatch, HARMFUL, FunctionJudge(says_paris), task_hits=4)
    check = summary["check"]
    assert check["checked"] is True and check["kept"] == "examples" and check["inputs"] == 3
    assert check["scores"] == {"task": 0.5, "generated": 0.0, "examples": 1.0} and check["examples"] == 3
    assert check["gains"] == {"generated": [-0.5, -0.5, -0.5], "examples": [0.5, 0.5, 0.5]}
    kept = records.load(ctx)
    assert kept.startswith(TASK.description) and "Example input: train question 3?\nExample answer: Paris" in kept
    # the examples come from the training inputs after the scored ones: never a scored or a validation input
    assert all(f"question {i}?" not in kept for i in range(3)) and "validation" not in kept
    (line,) = report._system_prompt_check(records.load_check(ctx), TASK)
    assert line == (
        "Checked on 3 training inputs (program judge), mean score and gain over the task text with its 95% "
        "interval: the task text 0.500; the generated prompt 0.000 (-0.500 [-0.500, -0.500]); the task text with "
        "examples 1.000 (+0.500 [+0.500, +0.500]); kept the task text with examples."
    )


def test_an_unusable_generated_prompt_is_no_candidate_and_the_artifact_says_why(tmp_path, monkeypatch):
    summary, ctx = run_stage(tmp_path, monkeypatch, HELPFUL, FunctionJudge(says_paris), 4, "too short (3 characters)")
    assert summary["fallback"] == "too short (3 characters)" and set(summary["check"]["scores"]) == {"task", "examples"}
    assert json.loads((ctx.artifact(system_prompt.NAME) / system_prompt.FILE).read_text())["fallback"].startswith("too")
    assert "generated prompt unusable (too short (3 characters)); it is no candidate" in ctx.console.export_text()


def test_a_generated_prompt_that_does_better_is_kept(tmp_path, monkeypatch):
    summary, ctx = run_stage(tmp_path, monkeypatch, HELPFUL, FunctionJudge(says_paris))
    check = summary["check"]  # no base answer scored: no examples to show
    assert check["kept"] == "generated" and check["examples"] == 0 and set(check["scores"]) == {"task", "generated"}
    assert records.load(ctx) == HELPFUL


def test_the_task_text_wins_a_tie(tmp_path, monkeypatch):
    summary, ctx = run_stage(tmp_path, monkeypatch, HELPFUL, FunctionJudge(says_paris), task_hits=1)
    check = summary["check"]  # every answer is right under every candidate
    assert check["gains"]["generated"] == [0.0, 0.0, 0.0] and check["kept"] == "task"
    assert records.load(ctx) == TASK.description


@pytest.mark.parametrize("noisy, why", [(True, "the judge is not reliable"), (False, "the check is off")])
def test_without_a_reliable_judge_the_task_text_is_the_prompt_and_the_report_says_so(tmp_path, monkeypatch, noisy, why):
    judge, settings = (NoisyModelJudge(), {}) if noisy else (FunctionJudge(says_paris), {"system_prompt_check": 0})
    summary, ctx = run_stage(tmp_path, monkeypatch, HARMFUL, judge, task_hits=4, **settings)
    assert summary["check"]["checked"] is False and summary["check"]["why"].startswith(why)
    assert records.load(ctx) == TASK.description
    (line,) = report._system_prompt_check(records.load_check(ctx), TASK)
    assert line.startswith("The task text is the system prompt, no other prompt was checked: " + why)
    assert summary["written"] == int(noisy)  # off: no prompt written
    assert (ctx.policy.answered == []) is (not noisy)  # off: not a single answer
    if noisy:  # audited on the worked examples' groups, before any candidate was compared
        assert {prompt for _, prompt in ctx.policy.answered} == {TASK.description}


def test_worked_examples_are_each_group_s_best_answer_that_scored_and_is_short():
    def group(question: str, scored: dict[str, float]) -> TrajectoryGroup:
        return TrajectoryGroup(
            Trajectory(
                messages_and_choices=[{"role": "user", "content": question}, {"role": "assistant", "content": a}],
                reward=r,
            )
            for a, r in scored.items()
        )

    groups = [
        group("q1", {"low": 0.2, "lower": 0.1}),  # a partial answer: shown when it is among the best
        group("q0", {"none": 0.0}),  # nothing scored
        group("q2", {"fine": 0.6, "better": 0.9}),
        group("q3", {"x" * (system_prompt.MAX_EXAMPLE_CHARS + 1): 1.0, "ok": 0.5}),
        group("q4", {"best": 1.0}),
    ]
    assert system_prompt.worked_examples(groups) == [("q4", "best"), ("q2", "better"), ("q3", "ok")]
    assert system_prompt.worked_examples(groups[:2]) == [("q1", "low")]
