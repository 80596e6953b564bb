"""Dynamic sampling: a training step whose groups tie draws more inputs until enough differ in score (up to its
budget), inputs that tie twice in a row are set aside and revisited, a resumed run draws what the killed one
would have, and groups whose scores differ by less than the judge's noise count as tied. The tie search: a tied
input gets more answers, judged with its earlier ones, before other inputs are drawn; a rare full-credit answer
it finds is trained on; an input whose answers all reach the top score leaves the pool. The train stage runs
with a scripted policy and a stand-in trainer (tests/test_step_costs.py's); the judge is a real program."""

from __future__ import annotations

import asyncio
import json
import shutil

from rich.console import Console

from autorl.tracking import Tracker
from autorl.training.checkpoints import checkpoint_name
from autorl.training.loss import advantages
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.config import RunConfig
from pipelines.records.pricing import Meter
from pipelines.sampling import REVISIT_AFTER, SAMPLING_FILE, InputQueue, step_draws
from pipelines.stage_context import StageContext
from pipelines.stages import train
from pipelines.steps.groups import balanced, sampled_groups
from ruler import FunctionJudge
from ruler.scores import TURN_REWARDS
from tests.helpers.pipeline import TASK, TRAIN, ScriptedPolicy, upstream_artifacts
from tests.test_step_costs import StandInModel

TIED = set(TRAIN[:2])
"""Inputs whose answers are all the same (every group of them ties)."""


class TyingPolicy(ScriptedPolicy):
    """Answers the `TIED` inputs with "x" every time and the others with "a" and "bb" in turn."""

    def __init__(self, run_dir):
        super().__init__(run_dir, ["a", "bb"])
        self.meter, self.model = Meter(), StandInModel(run_dir)

    async def answer(self, prompt, text, config, name=None):
        trajectory = await super().answer(prompt, text, config, name)
        if text in TIED:
            trajectory.messages_and_choices[-1]["content"] = "x"
        return trajectory


def train_stage(
    tmp_path, steps: int, policy: TyingPolicy | None = None, tie_spread: float = 0.0, tie_search: int = 0
) -> tuple[StageContext, Console]:
    config = RunConfig(
        group_size=2, groups_per_step=2, steps=steps, preflight="off", dynamic_sampling=2, validate_every=0,
        tie_search=tie_search,
    )  # fmt: skip
    config.train.tie_spread = tie_spread
    keys, store = upstream_artifacts(tmp_path, config)
    policy = policy or TyingPolicy(tmp_path / "train")
    console = Console(record=True, width=300)
    judge = FunctionJudge(lambda messages: len(messages[-1]["content"]) / 3)
    tracker = Tracker([], tmp_path / "run", "run", "id")
    ctx = StageContext(TASK, config, store, keys, policy, judge, tracker, tmp_path / "run", console)
    asyncio.run(train.run(ctx))
    return ctx, console


def records(ctx: StageContext, steps: int) -> list[dict]:
    return [
        json.loads((ctx.policy.run_dir / "steps" / checkpoint_name(n) / SAMPLING_FILE).read_text())
        for n in range(1, steps + 1)
    ]


def test_a_step_whose_groups_tie_draws_more_inputs_and_inputs_that_tie_twice_are_set_aside(tmp_path):
    ctx, console = train_stage(tmp_path, steps=4)
    drawn = [r["drawn"] for r in records(ctx, 4)]
    assert (
        drawn
        == [
            TRAIN[0:4],  # the first two tied: two more inputs, the budget (2 x 2 groups)
            TRAIN[4:6],
            TRAIN[0:4],  # the first two tied again: set aside
            TRAIN[4:6],  # then the cycle skips them
        ]
    )
    step3 = records(ctx, 4)[2]
    assert step3["tied"] == sorted(TIED) and step3["set_aside"] == sorted(TIED) and step3["answers"] == 8
    said = " ".join(console.export_text().split())
    assert "step 1/4: 2 of 4 groups tied; it drew 2 more inputs (dynamic sampling)" in said
    assert "step 3/4: 2 of 4 groups tied; it drew 2 more inputs (dynamic sampling); 2 inputs set aside" in said
    steps = ctx.policy.run_dir / "steps"  # the report's training table
    assert [step_draws(steps, n) for n in (1, 2, 3, 4, 5)] == ["4", "2", "4, 2 set aside", "2", "-"]

    # rebuilt from the records alone, the queue is where the run left it: the set-aside inputs come back later
    queue = InputQueue.rebuilt(TRAIN, ctx.policy.run_dir / "steps", 1, 5, 2)
    assert queue.aside_until == dict.fromkeys(TIED, 3 + 1 + REVISIT_AFTER)
    assert queue.draw(2, 5) == TRAIN[2:4] and queue.draw(6, 3 + 1 + REVISIT_AFTER) == TRAIN[4:] + TRAIN[:4]


def test_a_resumed_step_draws_what_the_killed_one_drew_and_reuses_its_scored_groups(tmp_path):
    ctx, _ = train_stage(tmp_path, steps=3)
    step3 = ctx.policy.run_dir / "steps" / checkpoint_name(3)
    before = records(ctx, 3)
    # killed after step 3's groups were scored, before its update: no checkpoint 3, no sampling record
    shutil.rmtree(ctx.policy.run_dir / "checkpoints" / checkpoint_name(3))
    (step3 / SAMPLING_FILE).unlink()
    policy = TyingPolicy(ctx.policy.run_dir)
    policy.model.step = 2
    train_stage(tmp_path, steps=3, policy=policy)
    assert records(ctx, 3) == before and policy.answered == []  # every group read back, none answered again


def test_the_queue_draws_in_turn_and_never_draws_nothing_or_one_input_twice():
    queue = InputQueue(TRAIN)
    assert queue.draw(2, 1) == TRAIN[:2] and queue.draw(2, 2) == TRAIN[2:4]
    queue.record(2, TRAIN[2:4], set(TRAIN[2:4]))
    assert queue.record(3, TRAIN[2:4], set(TRAIN[2:4])) == TRAIN[2:4]  # the second tie in a row
    queue.aside_until |= dict.fromkeys(TRAIN, 10)
    assert queue.draw(2, 4) == TRAIN[4:6]  # every input set aside: drawn anyway
    assert queue.draw(len(TRAIN) + 3, 4) == TRAIN  # never one input twice in a step
    queue = InputQueue(TRAIN)
    queue.aside_until = {text: 10 for text in TRAIN[1:]} | {TRAIN[3]: 8}  # one input left in play
    assert queue.draw(2, 4) == [TRAIN[0], TRAIN[3]]  # the step still gets two: the set-aside one due soonest


def test_groups_within_the_tie_spread_are_tied_for_the_sampling_as_for_the_update(tmp_path):
    ctx, _ = train_stage(tmp_path, steps=2, tie_spread=0.5)  # "a" and "bb" score 1/3 and 2/3: within it
    assert [len(r["drawn"]) for r in records(ctx, 2)] == [4, 4]  # every group tied: the budget at each step
    assert all(r["tied"] == sorted(r["drawn"]) for r in records(ctx, 2))


def test_scores_that_differ_by_less_than_the_judge_s_noise_tie():
    group = [0.00017, 0.00056, 0.0003]  # a RULER group judged as noise
    assert advantages([group])[0] is not None  # scaled by its tiny std: full strength
    assert advantages([group], tie_spread=0.05) == [None]
    assert advantages([[0.0, 0.6]], tie_spread=0.05)[0] is not None


class RecordingModel(StandInModel):
    """The stand-in trainer, keeping each update's groups."""

    def __init__(self, run_dir):
        super().__init__(run_dir)
        self.trained: list[list[TrajectoryGroup]] = []

    async def train(self, groups, config):
        self.trained.append(groups)
        return await super().train(groups, config)


class HalfCreditPolicy(TyingPolicy):
    """Answers the `TIED` inputs "x" (a third of the credit), but every third answer to the first of them "xxx"
    (full credit: the rare answer a search finds); the others as `TyingPolicy`."""

    def __init__(self, run_dir):
        super().__init__(run_dir)
        self.count, self.model = 0, RecordingModel(run_dir)

    async def answer(self, prompt, text, config, name=None):
        trajectory = await super().answer(prompt, text, config, name)
        if text == TRAIN[0]:
            self.count += 1
            if self.count % 3 == 0:
                trajectory.messages_and_choices[-1]["content"] = "xxx"
        return trajectory


def test_a_tied_input_is_searched_and_a_rare_full_credit_answer_is_trained_on(tmp_path):
    ctx, console = train_stage(tmp_path, steps=1, policy=HalfCreditPolicy(tmp_path / "train"), tie_search=3)
    (record,) = records(ctx, 1)
    # both first groups tie ("x", "x"): each gets 2 more answers; the first's third answer is "xxx" and differs,
    # the second still ties and the budget (2 x 2 groups of 2) is spent: no other input is drawn
    assert record["drawn"] == TRAIN[:2] and record["searched"] == dict.fromkeys(TRAIN[:2], 1)
    assert record["tied"] == [TRAIN[1]] and record["answers"] == 8
    group = json.loads((ctx.policy.run_dir / "steps" / checkpoint_name(1) / "group_00.json").read_text())
    assert [t["messages_and_choices"][-1]["content"] for t in group["trajectories"]] == ["x", "x", "xxx", "x"]
    assert group["metadata"]["search_rounds"] == 1 and group["metadata"]["cost"]["model_calls"]["policy"] == 4
    trained = ctx.policy.model.trained[0]  # the update's groups: the searched one cut to 2, the success kept
    assert [t.reward for t in trained[0].trajectories] == [1 / 3, 1.0] and len(trained[1].trajectories) == 2
    said = " ".join(console.export_text().split())
    assert "step 1/1: 1 of 2 groups tied; it searched 2 tied inputs with 4 more answers, and 1 now differ" in said
    assert step_draws(ctx.policy.run_dir / "steps", 1) == "2, 2 searched"


def test_a_resumed_search_reuses_its_rounds(tmp_path):
    ctx, _ = train_stage(tmp_path, steps=1, policy=HalfCreditPolicy(tmp_path / "train"), tie_search=3)
    before = records(ctx, 1)
    shutil.rmtree(ctx.policy.run_dir / "checkpoints" / checkpoint_name(1))  # killed before the update
    (ctx.policy.run_dir / "steps" / checkpoint_name(1) / SAMPLING_FILE).unlink()
    policy = HalfCreditPolicy(ctx.policy.run_dir)
    train_stage(tmp_path, steps=1, policy=policy, tie_search=3)
    assert records(ctx, 1) == before and policy.answered == []


class PerfectPolicy(TyingPolicy):
    """Answers the first input "xxx" (full credit) every time; the others as `TyingPolicy`."""

    async def answer(self, prompt, text, config, name=None):
        trajectory = await super().answer(prompt, text, config, name)
        if text == TRAIN[0]:
            trajectory.messages_and_choices[-1]["content"] = "xxx"
        return trajectory


def test_an_input_whose_answers_all_reach_the_top_score_is_done_and_not_searched(tmp_path):
    ctx, console = train_stage(tmp_path, steps=4, policy=PerfectPolicy(tmp_path / "train"), tie_search=3)
    step1 = records(ctx, 4)[0]
    assert step1["done"] == [TRAIN[0]] and TRAIN[0] not in step1["searched"]
    assert all(TRAIN[0] not in r["drawn"] for r in records(ctx, 4)[1:])  # out of the pool from then on
    assert "1 inputs done (every answer at the top score)" in " ".join(console.export_text().split())
    queue = InputQueue.rebuilt(TRAIN, ctx.policy.run_dir / "steps", 1, 5, 2)
    assert TRAIN[0] in queue.done and TRAIN[0] not in queue.draw(len(TRAIN), 5)


def test_balanced_down_sampling_keeps_the_answers_that_differ():
    def group(rewards):
        return TrajectoryGroup(
            [
                Trajectory(messages_and_choices=[{"role": "user", "content": str(i)}], reward=r)
                for i, r in enumerate(rewards)
            ]
        )

    one_success = group([0.5] * 11 + [1.0])
    assert [t.reward for t in balanced(one_success, 4).trajectories] == [0.5, 0.5, 0.5, 1.0]
    many = group([1.0, 0.0] * 6)
    assert sorted(t.reward for t in balanced(many, 4).trajectories) == [0.0, 0.0, 1.0, 1.0]
    assert balanced(one_success, 12) is one_success and balanced(one_success, 4).metadata["sampled"] == 12


class TurnByTurnPolicy(TyingPolicy):
    """The `TIED` inputs' answers all "x" (tied in total), their one turn's reward 0 and 1 in turn (credit per turn
    tells them apart)."""

    async def answer(self, prompt, text, config, name=None):
        trajectory = await super().answer(prompt, text, config, name)
        trajectory.metadata[TURN_REWARDS] = [float(len(self.answered) % 2)]
        return trajectory


def test_a_group_tied_in_total_but_not_turn_by_turn_is_not_searched(tmp_path):
    ctx, _ = train_stage(tmp_path, steps=1, policy=TurnByTurnPolicy(tmp_path / "train"), tie_search=3)
    (record,) = records(ctx, 1)
    assert record["searched"] == {} and record["tied"] == [] and record["answers"] == 4


def test_a_judge_not_trusted_with_sampling_marks_no_input_done(tmp_path):
    """Where the judge is a model its audit did not find reliable (`extend` False), every answer at its top is noise:
    the input stays in the pool, and nothing is searched."""
    config = RunConfig(group_size=2, groups_per_step=2, steps=1, preflight="off", tie_search=3)
    keys, store = upstream_artifacts(tmp_path, config)
    policy = PerfectPolicy(tmp_path / "train")
    judge = FunctionJudge(lambda messages: len(messages[-1]["content"]) / 3)
    ctx = StageContext(TASK, config, store, keys, policy, judge, Tracker([], tmp_path / "run", "run", "id"),
                       tmp_path / "run", Console(record=True, width=300))  # fmt: skip
    step_dir = tmp_path / "train" / "steps" / "0001"
    step_dir.mkdir(parents=True)
    queue = InputQueue(TRAIN)
    asyncio.run(sampled_groups(ctx, "p", queue, 1, step_dir, "step 1/1", 0.0, extend=False))
    record = json.loads((step_dir / SAMPLING_FILE).read_text())
    assert record["done"] == [] and record["searched"] == {} and queue.done == set()
