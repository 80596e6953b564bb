"""The preflight stage (judge audit, learnability check, inputs check), its gate, the sentinel's warnings and
the report's sections, in-process: a program judge, and a scripted policy at the edge (it answers from a
list instead of a vLLM server) so that what the stage asks of the policy is counted."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from rich.console import Console

from autorl.errors import AutoRLError
from autorl.trajectories import TrajectoryGroup
from pipelines import evaluation, sentinel
from pipelines.config import RunConfig
from pipelines.records import baseline, step_costs
from pipelines.records import evaluation as records
from pipelines.records import preflight as preflight_records
from pipelines.records import system_prompt as prompt_records
from pipelines.records import train as train_records
from pipelines.sampling import InputQueue
from pipelines.stage_context import StageContext
from pipelines.stages import preflight, report, train
from pipelines.steps import groups as step_groups
from ruler import FunctionJudge
from tests.helpers.pipeline import TASK, TRAIN, VAL, NoisyModelJudge, ScriptedPolicy, upstream_artifacts


def words(messages: list[dict]) -> float:
    return 1 / max(1, len(messages[-1]["content"].split()))


def context(tmp_path: Path, judge, answers: list[str], **settings) -> StageContext:
    """A stage context whose inputs, system prompt and baseline artifacts exist (the baseline's groups judged
    by `judge`), with a scripted policy answering `answers` in turn."""
    config = RunConfig(group_size=4, groups_per_step=2, learnability_groups=3, audit_groups=2, **settings)
    keys, store = upstream_artifacts(tmp_path, config)
    policy = ScriptedPolicy(tmp_path / "train", answers)
    ctx = StageContext(TASK, config, store, keys, policy, judge, None, tmp_path, Console(record=True, width=300))

    async def judged_baseline() -> list[TrajectoryGroup]:
        items = [[await policy.answer(TASK.system_prompt, t, config) for _ in range(2)] for t in VAL]
        return [await ctx.score(TrajectoryGroup(answers)) for answers in items]

    with store.write(baseline.NAME, keys[baseline.NAME], {}) as out:
        records.save(out, asyncio.run(judged_baseline()))
    policy.answered.clear()
    return ctx


def test_preflight_audits_the_judge_and_measures_the_signal_on_step_one_s_groups(tmp_path):
    ctx = context(tmp_path, FunctionJudge(words), ["Paris", "It is Paris", "Paris, France", "Lyon"])
    summary = asyncio.run(preflight.run(ctx))
    audit, signal = summary["audit"], summary["learnability"]
    assert audit["verdict"] == "reliable" and audit["groups"] == 2 and audit["rejudge_gap"] == 0
    assert signal == {
        "groups": 3,
        "group_sizes": [4],
        "groups_with_signal": 3,
        "signal_share": 1.0,
        "mean_reward": pytest.approx((1 + 1 / 3 + 1 / 2 + 1) / 4),
        "success_rate": 0.75,
    }
    assert summary["inputs_check"] == {"checked": 0, "why": "the judge is a program"}
    assert summary["problems"] == [] and summary["lines"][0].startswith("judge reliable")
    # the base model answered: step 1's two inputs and one more, group_size times each
    assert ctx.policy.served == [0] and {name for _, name in ctx.policy.answered} == {"step-0"}
    assert [text for text, _ in ctx.policy.answered[::4]] == TRAIN[:3]
    # step 1's groups are where the train stage reads its scored groups: it answers nothing again
    step_one = sorted(p.name for p in (ctx.policy.run_dir / "steps" / "0001").iterdir())
    assert step_one == ["group_00.json", "group_01.json"]
    before = len(ctx.policy.answered)
    texts = InputQueue(TRAIN).draw(2, 1)  # what the train stage's step 1 draws
    saved = [ctx.policy.run_dir / "steps" / "0001" / f"group_{i:02d}.json" for i in range(2)]
    reused = asyncio.run(step_groups.judged_groups(ctx, TASK.system_prompt, texts, saved, "step 1"))
    assert len(ctx.policy.answered) == before and [len(g) for g in reused] == [4, 4]
    assert sorted(t.reward for t in reused[0].trajectories) == [1 / 3, 1 / 2, 1.0, 1.0]
    # the figures and the sample are in the stage's own artifact
    assert preflight_records.load(ctx) == json.loads(json.dumps(summary))
    sample = (ctx.artifact(preflight.NAME) / preflight.SAMPLE).read_text().splitlines()
    assert [len(TrajectoryGroup.model_validate_json(line)) for line in sample] == [4, 4, 4]


def test_after_training_the_check_reads_step_one_s_groups_and_writes_nothing_beside_them(tmp_path):
    ctx = context(tmp_path, FunctionJudge(words), ["Paris", "It is Paris"])
    asyncio.run(preflight.run(ctx))
    checkpoint = ctx.policy.run_dir / "checkpoints" / "0001"
    checkpoint.mkdir(parents=True)
    for name in ("adapter_model.safetensors", "metrics.json"):  # what makes a checkpoint complete
        (checkpoint / name).write_text("{}")
    assert train_records.steps_done(ctx) == 1
    (ctx.policy.run_dir / "steps" / "0001" / "group_01.json").unlink()  # as if lost
    ctx.policy.answered.clear()
    summary = asyncio.run(preflight.run(ctx))
    assert summary["learnability"]["groups"] == 3
    # group 0 read back; group 1 and the extra group answered by the base model again, and not saved
    assert [text for text, _ in ctx.policy.answered[::4]] == [TRAIN[1], TRAIN[2]]
    assert {name for _, name in ctx.policy.answered} == {"step-0"}
    assert sorted(p.name for p in (ctx.policy.run_dir / "steps" / "0001").iterdir()) == ["group_00.json"]


def test_groups_that_tie_warn_before_training_and_strict_stops_there(tmp_path):
    never = FunctionJudge(lambda messages: 0.0)  # an all-or-nothing criterion the base model never meets
    ctx = context(tmp_path, never, ["Paris", "It is Paris"])
    summary = asyncio.run(preflight.run(ctx))
    assert summary["learnability"]["groups_with_signal"] == 0
    assert summary["audit"]["verdict"] == "uninformative"
    learn = next(line for line in summary["lines"] if line.startswith("learnability"))
    assert "0 of 3 groups of 4" in learn and "a larger --group-size (now 4)" in learn
    assert "a rubric with partial credit" in learn and learn in summary["problems"]
    preflight.gate(ctx, summary)  # warn: printed, the run goes on
    printed = ctx.console.export_text()
    assert "warning: learnability: 0 of 3 groups" in printed and "warning: judge uninformative" in printed
    strict = dataclasses.replace(ctx, config=ctx.config.model_copy(update={"preflight": "strict"}))
    with pytest.raises(AutoRLError) as stopped:
        preflight.gate(strict, summary)
    assert "stopped before training (--preflight strict" in str(stopped.value) and "\n" not in str(stopped.value)


def test_when_most_groups_tie_the_check_drops_the_inputs_that_carry_no_signal(tmp_path):
    def only_some(messages: list[dict]) -> float:  # inputs 3 and 4 are scored by length; the rest always tie at 0
        return words(messages) if messages[1]["content"] in TRAIN[3:5] else 0.0

    ctx = context(tmp_path, FunctionJudge(only_some), ["Paris", "It is Paris", "Lyon"])
    summary = asyncio.run(preflight.run(ctx))
    assert summary["learnability"]["groups_with_signal"] == 0  # the sample (inputs 0-2) all tied
    # it acted: one group of base answers to each other training input, judged
    assert [text for text, _ in ctx.policy.answered[::4]] == TRAIN
    assert summary["tied_action"] == {
        "policy": "drop",
        "inputs": 6,
        "judged": 6,
        "with_signal": 2,
        "kept": 2,
        "dropped": [TRAIN[0], TRAIN[1], TRAIN[2], TRAIN[5]],
    }
    learn = next(line for line in summary["lines"] if line.startswith("learnability"))
    assert "the check acted (--on-tied drop)" in learn and "training takes the 2 that do" in learn
    assert learn not in summary["problems"]  # acted on, not only warned about
    # training takes the kept inputs from step 1 on, whose saved groups are now theirs
    assert train.training_inputs(ctx) == TRAIN[3:5]
    step_one = ctx.policy.run_dir / "steps" / "0001"
    saved = [TrajectoryGroup.model_validate_json((step_one / f"group_{i:02d}.json").read_text()) for i in range(2)]
    assert [g.trajectories[0].metadata["input"] for g in saved] == TRAIN[3:5]
    # with what each took, which step 1's cost counts (step_costs.step_cost)
    assert [step_costs.group_cost(step_one / f"group_{i:02d}.json")["model_calls"]["policy"] for i in range(2)] == [
        4,
        4,
    ]
    # the report says what was done
    assert learn in "\n".join(report._preflight_section(preflight_records.load(ctx)))


def test_the_check_only_warns_under_on_tied_warn_or_when_no_input_carries_signal(tmp_path):
    ctx = context(tmp_path / "warn", FunctionJudge(lambda messages: 0.0), ["Paris", "It is Paris"], on_tied="warn")
    summary = asyncio.run(preflight.run(ctx))
    assert summary["tied_action"] is None and len(ctx.policy.answered) == 3 * 4  # the sample only
    assert train.training_inputs(ctx) == TRAIN
    ctx = context(tmp_path / "drop", FunctionJudge(lambda messages: 0.0), ["Paris", "It is Paris"])
    summary = asyncio.run(preflight.run(ctx))
    assert summary["tied_action"]["with_signal"] == 0 and summary["tied_action"]["dropped"] == []
    learn = next(line for line in summary["lines"] if line.startswith("learnability"))
    assert "keeps all (too few carry signal" in learn and learn in summary["problems"]
    assert train.training_inputs(ctx) == TRAIN


def test_preflight_off_asks_nothing(tmp_path):
    ctx = context(tmp_path, FunctionJudge(words), ["Paris"], preflight="off")
    assert asyncio.run(preflight.run(ctx)) == {"off": True}
    assert ctx.policy.answered == [] and ctx.policy.served == []
    assert preflight_records.load(ctx) == {"off": True}
    preflight.gate(ctx, {"off": True})
    assert "preflight off" in ctx.console.export_text()


def history(*steps: tuple[float, float, float]) -> list[dict]:
    """(reward, kl_to_base, base_logprob) per step."""
    return [
        {"step": i, "reward": r, "kl_to_base": kl, "base_logprob": lp} for i, (r, kl, lp) in enumerate(steps, start=1)
    ]


def test_the_sentinel_warns_when_the_policy_moves_far_while_the_reward_rises():
    assert sentinel.training_warning(history((0.2, 0.0, -1.5))) is None  # step 1 alone
    assert sentinel.training_warning(history((0.2, 0.0, -1.5), (0.5, 0.1, -1.7))) is None  # near the base
    assert sentinel.training_warning(history((0.5, 0.0, -1.5), (0.3, 2.0, -4.0))) is None  # the reward fell
    # the figures are the means of the last RISE_STEPS steps: one far step among near ones is not far
    near = history((0.2, 0.0, -1.5), (0.4, 0.2, -1.6), (0.9, sentinel.KL_FAR, -1.6))
    assert sentinel.training_warning(near) is None
    steps = history((0.2, 0.0, -1.5), (0.4, 0.2, -1.6), (0.9, 0.6, -1.6), (0.9, 0.7, -1.6))
    warning = sentinel.training_warning(steps)
    assert warning.startswith("step 4: the training reward rose (0.200 at step 1, 0.733 lately)")
    assert "KL to the base model 0.50 nats/token" in warning
    assert sentinel.first_drift(steps) == 4 and sentinel.first_drift(near) is None
    # steps without the figures (TrainerConfig.drift_every): judged at the next one with them, on those measured
    gapped = [{k: v for k, v in h.items() if k in ("step", "reward") or h["step"] in (1, 4)} for h in steps]
    assert sentinel.training_warning(gapped[:3]) is None and sentinel.first_drift(gapped) == 4
    assert "KL to the base model 0.70 nats/token" in sentinel.training_warning(gapped)  # step 4's alone
    drop = sentinel.training_warning(history((0.2, 0.0, -1.5), (0.9, 0.1, -1.5 - sentinel.LOGPROB_DROP_FAR)))
    assert "1.00 nats/token less likely than its own" in drop
    console = Console(record=True, width=300)
    sentinel.warn_or_stop(console, warning, "warn")
    assert "warning: step 4" in console.export_text()
    with pytest.raises(AutoRLError, match="stopped \\(--on-drift stop, or --preflight strict"):
        sentinel.warn_or_stop(console, warning, "stop")
    config = sentinel.SentinelConfig(on_drift="warn")
    assert (sentinel.policy(config, "strict"), sentinel.policy(config, "warn")) == ("stop", "warn")
    assert sentinel.policy(sentinel.SentinelConfig(), "strict") == "rollback"
    assert sentinel.rollback_target(10, [2, 5, 7, 9, 10]) == 7 and sentinel.rollback_target(3, [1, 2, 3]) == 0
    assert sentinel.adjusted(0.0, 1e-4, sentinel.SentinelConfig(rollback_lr_factor=0.5)) == {
        "kl_beta": 0.1, "learning_rate": 5e-5
    }  # fmt: skip
    assert sentinel.adjusted(0.1, 1e-4, sentinel.SentinelConfig())["kl_beta"] == 0.2  # doubled the second time


def checks(verdict: str = "reliable", floor: float = 0.0) -> dict:
    audit = {
        "judge": "words", "groups": 2, "answers": 4, "attempts": 0, "rejudge_gap": floor, "answer_spread": 0.4,
        "reliability": 1.0, "rank_agreement": 1.0, "position_effect": 0.0, "duplicate_gap": 0.0, "verdict": verdict,
    }  # fmt: skip
    lines = [f"judge {verdict}: scripted", "learnability: 3 of 3 groups differ", "inputs: not checked (a program)"]
    return {"audit": audit, "learnability": {}, "inputs_check": {"checked": 0}, "lines": lines, "problems": []}


def evaluated(latest: float, drift_latest: dict) -> dict:
    variants = {
        "base": {"mean": 0.3, "ci_low": 0.2, "ci_high": 0.4, "inputs": 6, "step": 0},
        "latest": {"mean": latest, "ci_low": latest - 0.1, "ci_high": latest + 0.1, "inputs": 6, "step": 20},
    }
    drift = {"base": {"base_logprob": -1.2, "kl_to_base": 0.001}, "latest": drift_latest}
    return {"val_inputs": 6, "variants": variants, "drift": drift}


def test_the_report_puts_the_verdict_the_noise_floor_and_the_sentinel_beside_every_gain():
    near = report._gain_section(checks(floor=0.0), evaluated(0.8, {"base_logprob": -1.4, "kl_to_base": 0.05}))
    text = "\n".join(near)
    assert "| latest | +0.500 | 0.000: outside | -1.400 (-0.200) | 0.050 |" in text
    assert "Judge verdict: judge reliable: scripted." in text and "Warning" not in text
    gamed = "\n".join(
        report._gain_section(checks(floor=0.0), evaluated(0.9, {"base_logprob": -4.0, "kl_to_base": 1.8}))
    )
    assert "**Warning:** latest's validation reward is +0.600 over the base model's" in gamed
    assert "2.80 nats/token less likely" in gamed and "KL to the base model 1.80" in gamed
    noisy = "\n".join(report._gain_section(checks("noise", floor=0.3), evaluated(0.5, {"base_logprob": -1.2})))
    assert "0.300: inside" in noisy and "inside the judge's own noise (0.300): it says nothing" in noisy
    assert "Judge verdict: judge noise" in noisy
    off = "\n".join(report._gain_section({"off": True}, evaluated(0.5, {})))
    assert "not measured" in off and "checks before training were off" in off
    section = "\n".join(report._preflight_section(checks()))
    assert "| score change when asked again (the noise floor) | 0.000 |" in section
    assert "learnability: 3 of 3 groups differ" in section and "inputs: not checked" in section


def test_the_reward_curve_draws_the_judges_noise_floor_as_a_band_around_the_base_line():
    steps = pd.DataFrame({"step": [1, 2, 3], "reward": [0.3, 0.4, 0.45], "reward_std": [0.1, 0.1, 0.1]})
    variants = evaluated(0.5, {})["variants"]
    figure = report.reward_curve(steps, variants, report.noise_floor(checks("noise", floor=0.3)))
    ax = figure.axes[0]
    bands = [p for p in ax.patches if p.get_label().startswith(report.NOISE_BAND)]
    assert len(bands) == 1 and "(±0.300)" in bands[0].get_label()
    low, high = bands[0].get_path().transformed(bands[0].get_patch_transform()).get_extents().intervaly
    assert (low, high) == pytest.approx((0.3 - 0.3, 0.3 + 0.3))  # base 0.3 +- the floor: latest's 0.5 inside
    assert report.NOISE_BAND in " ".join(t.get_text() for t in ax.get_legend().get_texts())
    plt.close(figure)
    unmeasured = report.reward_curve(steps, variants, report.noise_floor({"off": True}))
    assert not [p for p in unmeasured.axes[0].patches if p.get_label().startswith(report.NOISE_BAND)]
    assert "noise not measured" in unmeasured.axes[0].get_title()
    plt.close(unmeasured)


@pytest.mark.parametrize("shares_cpu", [False, True])
def test_groups_are_judged_after_every_answer_only_where_the_embedded_judge_shares_the_cpu(tmp_path, shares_cpu):
    judged: list[tuple[str, int]] = []  # (input, answers made by then) per judged answer
    answered: list[tuple[str, str | None]] = []

    def judge(messages: list[dict]) -> float:
        judged.append((messages[1]["content"], len(answered)))
        return words(messages)

    ctx = context(tmp_path, FunctionJudge(judge), ["Paris", "It is Paris"])
    answered = ctx.policy.answered
    ctx.policy.shares_cpu = shares_cpu
    ctx.policy.delays = {VAL[2]: 0.3}  # the last input's answers come late
    judged.clear()
    items = [evaluation.answers(ctx, "One word only.", text, "step-0", "base") for text in VAL]
    groups = asyncio.run(evaluation.judged_per_input(ctx, items, "evaluate"))
    assert [g.trajectories[0].metadata["input"] for g in groups] == VAL  # in order, all judged
    assert all(t.reward is not None for g in groups for t in g.trajectories)
    first = judged[0]
    if shares_cpu:  # the judge waits for the last answer, then gets every group
        assert {answers for _, answers in judged} == {2 * len(VAL)}
    else:  # each group is judged as soon as its answers are in: the first before the late ones exist
        assert first[0] == VAL[0] and first[1] < 2 * len(VAL)
    assert ctx.judge_after_rollouts is shares_cpu
    ctx.config = ctx.config.model_copy(update={"judge": "openai/gpt-4o"})
    assert ctx.judge_after_rollouts is False  # an API judge does not share the cores


class CountingNoisyJudge(NoisyModelJudge):
    """A noisy model-like judge that counts the groups it is asked to score."""

    def __init__(self):
        super().__init__()
        self.asked = 0

    async def score_group(self, message_lists, **kwargs):
        self.asked += 1
        return await super().score_group(message_lists, **kwargs)


@pytest.mark.parametrize("found_before", [True, False])
def test_a_judge_the_system_prompt_check_found_to_be_noise_is_not_audited_again(tmp_path, found_before):
    ctx = context(tmp_path, CountingNoisyJudge(), ["Paris", "It is Paris", "Paris, France", "Lyon"])
    if found_before:  # the system prompt check audited the judge on its own groups (here: the baseline's)
        audit = asyncio.run(step_groups.judge_audit(ctx, records.load_groups(ctx.artifact(baseline.NAME))))
        assert audit["verdict"] == "noise"
        prompt_file = ctx.artifact(prompt_records.NAME) / prompt_records.FILE
        recorded = json.loads(prompt_file.read_text())
        prompt_file.write_text(json.dumps({**recorded, "check": {"checked": False, "why": "noise", "audit": audit}}))
    ctx.judge.asked = 0
    summary = asyncio.run(preflight.run(ctx))
    audit = summary["audit"]
    assert audit["verdict"] == "noise" and summary["lines"][0].startswith(audit["line"])
    learnability = 3  # the groups judged for the learnability check
    if found_before:  # the judge scored the learnability check's groups and nothing more
        assert audit["reused"] == "system prompt check" and audit["line"].endswith("not asked again)")
        assert ctx.judge.asked == learnability
        assert "in the system prompt check (its verdict, noise, not asked again here" in "\n".join(
            report._preflight_section(summary)
        )
    else:  # two re-judgings of each audited group
        assert "reused" not in audit and ctx.judge.asked == learnability + 2 * ctx.config.audit_groups
