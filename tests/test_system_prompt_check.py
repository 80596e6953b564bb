"""The system prompt earns its place: a generated prompt is scored against the task text as the system prompt
before training, where the judge is reliable, and the better one is kept; where the judge is not, the run
says the prompt was not checked. The policy is a stand-in whose answers follow its system prompt; the
generator (a model) is the edge replaced here; the judges are a real program judge and a noisy model-like one."""

from __future__ import annotations

import asyncio
import random

import pytest
from rich.console import Console

from autorl.inputs.generation import WrittenSystemPrompt
from autorl.task import TaskSpec
from autorl.trajectories import Trajectory
from pipelines.config import RunConfig
from pipelines.context import StageContext
from pipelines.stages import report, system_prompt
from ruler import FunctionJudge, TrajectoryScore
from tests.helpers.pipeline import ScriptedPolicy, upstream_artifacts

TASK = TaskSpec(description="Answer with the capital city, one word.")
HARMFUL = "The response must have 2 paragraphs separated with *** and must contain 'you' in bold."
HELPFUL = "Answer with one word: the name of the city."


class PromptFollowingPolicy(ScriptedPolicy):
    """Answers as its system prompt says: the task text gets "Paris", the harmful prompt an essay, the
    helpful one "Paris"."""

    async def answer(self, prompt: str, text: str, config: RunConfig, name: str | None = None) -> Trajectory:
        self.answered.append((text, prompt))
        reply = "You **you** see, it is a city.\n***\nA lovely one" if prompt == HARMFUL else "Paris"
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
        return Trajectory(messages_and_choices=[*messages, {"role": "assistant", "content": reply}])


def says_paris(messages: list[dict]) -> float:
    """A program judge that checks content: the answer names the city (and it sees no system prompt)."""
    assert all(m["role"] != "system" for m in messages)
    return 1.0 if messages[-1]["content"].strip() == "Paris" else 0.0


class NoisyModelJudge:
    """A judge that reads rubrics, as a model does, and scores at random: its audit is not reliable."""

    reads_rubric = True

    def __init__(self):
        self.random = random.Random(0)

    async def score_group(self, message_lists, *, rubric, tools=None, task=None):
        return [
            TrajectoryScore(trajectory_id=str(i + 1), explanation="?", score=self.random.random())
            for i in range(len(message_lists))
        ]


def run_stage(tmp_path, monkeypatch, generated: str, judge, **settings) -> tuple[dict, StageContext]:
    monkeypatch.setattr(system_prompt, "generate_system_prompt", lambda *_: WrittenSystemPrompt(generated, None))
    config = RunConfig(eval_samples=2, **settings)
    keys, store = upstream_artifacts(tmp_path, config, TASK, with_prompt=False)
    policy = PromptFollowingPolicy(tmp_path / "train", ["unused"])
    ctx = StageContext(TASK, config, store, keys, policy, judge, None, tmp_path, Console(record=True, width=300))
    return asyncio.run(system_prompt.run(ctx)), ctx


def test_a_generated_prompt_that_hurts_the_answers_gives_way_to_the_task_text(tmp_path, monkeypatch):
    summary, ctx = run_stage(tmp_path, monkeypatch, HARMFUL, FunctionJudge(says_paris))
    check = summary["check"]
    assert check == {
        "checked": True, "inputs": 4, "judge": "program", "scores": {"generated": 0.0, "task": 1.0}, "kept": "task"
    }  # fmt: skip
    assert system_prompt.load(ctx) == TASK.description
    assert {prompt for _, prompt in ctx.policy.answered} == {HARMFUL, TASK.description}
    assert len(ctx.policy.answered) == 4 * 2 * 2  # 4 inputs x 2 prompts x eval_samples
    (line,) = report._system_prompt_check(system_prompt.load_check(ctx), TASK)
    assert line == (
        "Checked on 4 training inputs (program judge): the generated prompt's answers scored 0.000, the task "
        "text's 1.000; kept the task text instead."
    )


def test_a_generated_prompt_that_does_no_worse_is_kept(tmp_path, monkeypatch):
    summary, ctx = run_stage(tmp_path, monkeypatch, HELPFUL, FunctionJudge(says_paris), system_prompt_check=2)
    assert summary["check"]["kept"] == "generated" and summary["check"]["inputs"] == 2
    assert system_prompt.load(ctx) == HELPFUL


@pytest.mark.parametrize("noisy, why", [(True, "the judge is not reliable"), (False, "the check is off")])
def test_without_a_reliable_judge_the_prompt_is_kept_unchecked_and_the_report_says_so(
    tmp_path, monkeypatch, noisy, why
):
    judge, settings = (NoisyModelJudge(), {}) if noisy else (FunctionJudge(says_paris), {"system_prompt_check": 0})
    summary, ctx = run_stage(tmp_path, monkeypatch, HARMFUL, judge, **settings)
    assert summary["check"]["checked"] is False and summary["check"]["why"].startswith(why)
    assert system_prompt.load(ctx) == HARMFUL
    (line,) = report._system_prompt_check(system_prompt.load_check(ctx), TASK)
    assert line.startswith("The system prompt was not checked against the task text: " + why)
    assert (ctx.policy.answered == []) is (not noisy)  # off: not a single answer
