"""Steps by the curve: without `--steps`, training stops once `--patience` validations in a row found no new best
(the held-out curve has flattened), the finished stage says so and counts as done; a given `--steps N` is a fixed
budget that trains on past the flattened curve. The train stage runs with a scripted policy whose held-out answers
get worse after step 1, a stand-in trainer that logs validations as `model.log` does, and a program judge."""

from __future__ import annotations

import asyncio
import json
import statistics

from rich.console import Console

from autorl.backends.run_dir import LOG_HISTORY_FILE, append_history
from autorl.tracking import Tracker
from pipelines.config import RunConfig
from pipelines.records.pricing import Meter
from pipelines.records.train import flattened, stopped_by_curve, stops_by_curve, validated_steps
from pipelines.stage_context import StageContext
from pipelines.stages import train
from ruler import FunctionJudge
from tests.helpers.pipeline import TASK, VAL, ScriptedPolicy, upstream_artifacts
from tests.test_step_costs import StandInModel


class ValidatedModel(StandInModel):
    """The stand-in trainer, logging a validation's mean as `val/reward` (what `model.log` records)."""

    async def log(self, groups, split="val", step=None):
        rewards = [t.reward for g in groups for t in g.trajectories]
        append_history(self.run_dir, {"step": step, "split": split, "val/reward": statistics.fmean(rewards)},
                       LOG_HISTORY_FILE)  # fmt: skip


class WorseAfterStepOne(ScriptedPolicy):
    """Training answers "a" and "bb" in turn (groups differ); held-out answers "ccc" from step 1's checkpoint,
    "a" from any later one."""

    def __init__(self, run_dir):
        super().__init__(run_dir, ["a", "bb"])
        self.meter, self.model = Meter(), ValidatedModel(run_dir)

    async def answer(self, prompt, text, config, name=None):
        trajectory = await super().answer(prompt, text, config, name)
        if text in VAL:
            trajectory.messages_and_choices[-1]["content"] = "ccc" if name == "step-1" else "a"
        return trajectory


def run_train(tmp_path, **settings) -> tuple[StageContext, str]:
    config = RunConfig(group_size=2, groups_per_step=1, preflight="off", validate_every=1, **settings)
    keys, store = upstream_artifacts(tmp_path, config)
    console = Console(record=True, width=300)
    judge = FunctionJudge(lambda messages: len(messages[-1]["content"]) / 3)
    tracker = Tracker([], tmp_path / "run", "run", "id")
    policy = WorseAfterStepOne(tmp_path / "train")
    ctx = StageContext(TASK, config, store, keys, policy, judge, tracker, tmp_path / "run", console)
    asyncio.run(train.run(ctx))
    return ctx, " ".join(console.export_text().split())


def test_without_steps_training_stops_when_validation_stops_improving(tmp_path):
    ctx, said = run_train(tmp_path)  # steps not given: 20 is the cap
    assert validated_steps(ctx.policy.run_dir) == [1, 2, 3]  # 3: the second validation in a row below step 1's
    assert (
        "step 3: validation has not beaten step 1's for 2 validations, so training stops here, before step 20" in said
    )
    manifest = json.loads((ctx.policy.run_dir / "artifact.json").read_text())
    assert manifest["steps"] == 3 and manifest["stopped_by_curve"] == {"step": 3, "best": 1}
    # done as it is, by the rule `train.is_done` applies to the stage's artifact (here the stand-in's directory)
    assert stops_by_curve(ctx.config) and stopped_by_curve(ctx.policy.run_dir) and train.best_step(ctx) == 1


def test_a_given_step_count_is_a_fixed_budget(tmp_path):
    ctx, said = run_train(tmp_path, steps=4)
    assert validated_steps(ctx.policy.run_dir) == [1, 2, 3, 4] and "training stops here" not in said


def test_the_curve_has_flattened_when_the_last_validations_beat_no_earlier_one(tmp_path):
    def logged(values):
        (tmp_path / LOG_HISTORY_FILE).unlink(missing_ok=True)
        for step, value in enumerate(values, 1):
            append_history(tmp_path, {"step": step, "val/reward": value}, LOG_HISTORY_FILE)
        return flattened(tmp_path, 2)

    assert logged([0.2, 0.5]) is None  # too few validations to say
    assert logged([0.2, 0.5, 0.4, 0.5]) == 2  # equal is no better
    assert logged([0.2, 0.5, 0.4, 0.6]) is None  # the last beat the best
    assert logged([0.5, 0.2, 0.3, 0.4, 0.1]) == 1  # rising again, but not past the best
