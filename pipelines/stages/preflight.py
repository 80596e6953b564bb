"""Stage `preflight`: know before you train whether the judge is a judge and whether GRPO can get a signal.

- The judge audit (`ruler.audit_judge`): `audit_groups` of the groups judged before training (the
  learnability sample's, then the baseline's) asked about again, in reverse order (other positions, other
  ids: another prompt, not the cache's copy) and with one answer shown twice; the re-judging noise against
  the spread between answers gives a verdict, and the noise floor that the report attaches to the
  base-vs-trained comparison. A program judge comes out exactly consistent. A judge the system prompt
  check already found to be noise is not asked again (`steps.groups.judge_audit`): its audit is this one.
- The learnability check: `learnability_groups` groups of `group_size` base-model answers to training
  inputs, judged: the share of groups whose answers differ in score (what GRPO learns from), the base
  model's mean reward and success rate. The first `groups_per_step` groups are training step 1's: they are
  saved where the train stage reads its scored groups (`steps/0001/`), and step 1 trains on them, so they
  cost nothing extra (the base model is the policy before step 1; same inputs, sampling settings and judge).
- The inputs check: a reliable judge that reads rubrics (`ruler.audit.reads_rubric`) is asked once which of
  a sample of the inputs are requests the task would get; otherwise the inputs are said to be unchecked.

The stage's artifact holds the figures (`preflight.json`) and the learnability sample (`learnability.jsonl`).
Its `gate` prints the verdict lines before training, cached or not, and under `--preflight strict` stops the
run there unless the judge is reliable and the groups carry signal. With `--preflight off` it does nothing.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from autorl.atomic import atomic_text
from autorl.errors import AutoRLError
from autorl.inputs.files import read_inputs_jsonl
from autorl.task import TaskSpec
from autorl.training.loss import advantages
from autorl.trajectories import TrajectoryGroup
from ruler.audit import check_inputs, reads_rubric
from ruler.prompt import canonical_json

from ..config import RunConfig
from ..evaluation import SUCCESS
from ..records import baseline, inputs, system_prompt, train
from ..records import evaluation as records
from ..records.preflight import FILE, NAME, SAMPLE, kept_inputs
from ..sampling import InputQueue
from ..stage_context import StageContext
from ..steps import groups as step_groups
from ..steps.groups import judge_audit

UPSTREAM = ("inputs", "system_prompt", "baseline")
INPUTS_CHECKED = 8
"""Inputs (train and validation, evenly spread) the inputs check shows a reliable judge."""
MIN_SIGNAL_SHARE = 0.5
"""Under this share of the learnability sample's groups with answers that differ in score, the check warns."""


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    if config.preflight == "off":
        return {"off": True}
    return {
        **step_groups.group_settings(task, config),  # it makes training's step 1 groups, as that step would
        "audit_groups": config.audit_groups,
        "learnability_groups": config.learnability_groups,
    }


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    if ctx.config.preflight == "off":
        with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
            (out / FILE).write_text(json.dumps({"off": True}))
        return {"off": True}
    sample = await _learnability_sample(ctx)
    signal = learnability(sample)
    action = await _act_on_ties(ctx, sample, signal)
    audit = await _audit(ctx, sample)
    if audit["verdict"] == "reliable" and reads_rubric(ctx.judge):
        checked = await _check_inputs(ctx)
    else:
        why = (
            "the judge is a program"
            if not reads_rubric(ctx.judge)
            else f"the judge is not reliable ({audit['verdict']})"
        )
        checked = {"checked": 0, "why": why}
    summary = {"audit": audit, "learnability": signal, "inputs_check": checked, "tied_action": action}
    summary["lines"], summary["problems"] = verdict_lines(summary, ctx.config)
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        (out / FILE).write_text(json.dumps(summary, indent=1))
        (out / SAMPLE).write_text("".join(g.model_dump_json() + "\n" for g in sample))
    return summary


def gate(ctx: StageContext, summary: dict[str, Any]) -> None:
    """Print the verdict lines before training (cached or not); under `--preflight strict` raise the first
    problem as the run's one error line."""
    if summary.get("off"):
        ctx.console.print("[dim]preflight off: the judge is not audited and learnability not checked[/dim]")
        return
    for line in summary["lines"]:
        problem = line in summary["problems"]
        ctx.console.print(f"[yellow]warning: {line}[/yellow]" if problem else line, highlight=False)
    if summary["problems"] and ctx.config.preflight == "strict":
        raise AutoRLError(
            f"{summary['problems'][0]}; stopped before training (--preflight strict; --preflight warn goes on)"
        )


async def _audit(ctx: StageContext, sample: list[TrajectoryGroup]) -> dict[str, Any]:
    """The judge audit over `audit_groups` of the groups judged before training that have two distinct
    answers: the learnability sample's first (`group_size` answers each: the groups GRPO trains on, and
    `group_size` - 1 degrees of freedom each for the noise, where a baseline pair of `eval_samples` = 2 has
    one), then the baseline's."""
    judged = [*sample, *records.load_groups(ctx.artifact(baseline.NAME))]
    chosen = [g for g in judged if len({canonical_json(t.messages()) for t in g.trajectories}) >= 2]
    chosen = chosen[: ctx.config.audit_groups]
    return await judge_audit(ctx, chosen, earlier=system_prompt.check_audit(ctx))


async def _learnability_sample(ctx: StageContext) -> list[TrajectoryGroup]:
    """Step 1's judged groups (saved for the train stage when it has not trained yet; read when it has) and
    the extra groups up to `learnability_groups`, all answered by the base model."""
    config, work = ctx.config, ctx.policy.run_dir
    prompt, train_inputs = system_prompt.load(ctx), inputs.load(ctx, "train")
    total = max(config.learnability_groups, config.groups_per_step)
    texts = [train_inputs[index % len(train_inputs)] for index in range(total)]
    step_one = work / "steps" / "0001"
    untrained = train.steps_done(ctx) == 0
    saved = [step_one / f"group_{i:02d}.json" for i in range(config.groups_per_step)]
    if untrained:
        step_one.mkdir(parents=True, exist_ok=True)
    else:  # step 1 was trained: its saved groups are the base model's; never write beside them
        saved = [path if path.exists() else None for path in saved]
    saved += [None] * (total - config.groups_per_step)
    base = await ctx.policy.serve_step(0)
    return await step_groups.judged_groups(ctx, prompt, texts, saved, "learnability", name=base)


def mostly_tied(signal: dict[str, Any]) -> bool:
    """Whether the learnability check's groups mostly tie (under `MIN_SIGNAL_SHARE` differ in score)."""
    return bool(signal["groups"]) and signal["signal_share"] < MIN_SIGNAL_SHARE


async def _act_on_ties(ctx: StageContext, sample: list[TrajectoryGroup], signal: dict[str, Any]) -> dict | None:
    """Under `on_tied = "drop"`, when most groups of the sample tie and training has not begun: one group of base
    answers to each training input the sample lacks, judged, then `drop_tied_inputs` of them all; step 1's saved
    groups become those of the first inputs kept (the train stage trains on the kept inputs from step 1 on).
    None when there is nothing to act on."""
    config = ctx.config
    if config.on_tied != "drop" or not mostly_tied(signal) or train.steps_done(ctx) > 0:
        return None
    prompt, train_inputs = system_prompt.load(ctx), inputs.load(ctx, "train")
    sampled = {g.trajectories[0].metadata.get("input") for g in sample if g.trajectories}
    missing = [text for text in train_inputs if text not in sampled]
    base = await ctx.policy.serve_step(0)
    more = await step_groups.judged_groups(ctx, prompt, missing, [None] * len(missing), "every input", name=base)
    action = drop_tied_inputs(train_inputs, [*sample, *more], config.groups_per_step)
    if action["kept"] < len(train_inputs):
        by_input = {g.trajectories[0].metadata.get("input"): g for g in [*sample, *more] if g.trajectories}
        step_one = ctx.policy.run_dir / "steps" / "0001"
        for index, text in enumerate(InputQueue(kept_inputs(train_inputs, action)).draw(config.groups_per_step, 1)):
            atomic_text(step_one / f"group_{index:02d}.json", by_input[text].model_dump_json())
    return action


def drop_tied_inputs(train_inputs: list[str], groups: list[TrajectoryGroup], groups_per_step: int) -> dict[str, Any]:
    """The policy `on_tied = "drop"`: which training inputs to train on, from judged groups of base answers to
    them (`metadata["input"]` names a group's input): those with a group whose answers differ in score. When
    fewer than `groups_per_step` have one, all are kept (a step needs its groups; the warning stands)."""
    rewards = {}
    for group in groups:
        if group.trajectories:
            rewards.setdefault(group.trajectories[0].metadata.get("input"), []).append(
                [t.reward for t in group.trajectories]
            )
    with_signal = {text for text, sets in rewards.items() if any(a is not None for a in advantages(sets))}
    dropped = [text for text in train_inputs if text in rewards and text not in with_signal]
    if len(train_inputs) - len(dropped) < groups_per_step:
        dropped = []
    return {
        "policy": "drop",
        "inputs": len(train_inputs),
        "judged": len(rewards),
        "with_signal": len(with_signal),
        "kept": len(train_inputs) - len(dropped),
        "dropped": dropped,
    }


def learnability(groups: list[TrajectoryGroup]) -> dict[str, Any]:
    """What GRPO can learn from `groups` (judged groups of base-model answers): how many have answers that
    differ in score (the trainer's own tie rule), the mean reward and the success rate (scored >= `SUCCESS`)."""
    rewards = [[t.reward for t in g.trajectories] for g in groups]
    answers = [r for group in rewards for r in group]
    signal = sum(a is not None for a in advantages(rewards))
    return {
        "groups": len(groups),
        "group_sizes": sorted({len(r) for r in rewards}),
        "groups_with_signal": signal,
        "signal_share": signal / len(groups) if groups else 0.0,
        "mean_reward": statistics.fmean(answers) if answers else None,
        "success_rate": sum(r >= SUCCESS for r in answers) / len(answers) if answers else None,
    }


async def _check_inputs(ctx: StageContext) -> dict[str, Any]:
    rows = read_inputs_jsonl(ctx.artifact(inputs.NAME) / inputs.FILE)
    count = min(INPUTS_CHECKED, len(rows))
    texts = [rows[i * len(rows) // count].input for i in range(count)]
    try:
        result = await check_inputs(ctx.judge, texts, task=ctx.task.description)
    except Exception as exc:  # the audit found the judge reliable; a failure here leaves the inputs unchecked
        return {"checked": 0, "why": f"the judge could not answer ({type(exc).__name__}: {str(exc)[:100]})"}
    ctx.calls["judge"] += result.attempts
    ctx.judging["groups"] += 1
    return result.as_dict()


def verdict_lines(summary: dict[str, Any], config: RunConfig) -> tuple[list[str], list[str]]:
    """The lines printed before training (judge, learnability, inputs) and those of them that are problems."""
    audit, signal, checked = summary["audit"], summary["learnability"], summary["inputs_check"]
    judge = audit["line"] + ("; pass a capable --judge" if audit["verdict"] == "noise" else "")
    lines, problems = [judge], [] if audit["verdict"] == "reliable" else [judge]
    if not signal["groups"]:
        learn = "learnability: the judge scored no group of the base model's answers to training inputs"
        problems.append(learn)
    else:
        learn = (
            f"learnability: {signal['groups_with_signal']} of {signal['groups']} groups of {config.group_size} "
            f"base-model answers to training inputs differ in score (what GRPO learns from); base mean reward "
            f"{signal['mean_reward']:.3f}, success rate {signal['success_rate']:.2f} (answers scored >= {SUCCESS})"
        )
        advice = (
            f"; most groups tie, so GRPO has little to learn from: try a larger --group-size (now "
            f"{config.group_size}), a rubric with partial credit, a worked example in the system prompt, or a "
            "stronger model"
        )
        if (action := summary.get("tied_action")) is not None:
            learn += (
                f"; most groups tie, so the check acted (--on-tied drop): it judged a group for each of the "
                f"{action['inputs']} training inputs, of which {action['with_signal']} differ in score, and "
                + (
                    f"training takes the {action['kept']} that do"
                    if action["dropped"]
                    else f"keeps all (too few carry signal to drop the rest){advice}"
                )
            )
            if not action["dropped"]:
                problems.append(learn)
        elif mostly_tied(signal):
            learn += advice
            problems.append(learn)
    lines.append(learn)
    if checked.get("checked"):
        lines.append(
            f"inputs: the judge found {checked['on_task']} of {checked['checked']} sampled inputs to be requests "
            "the task would get"
        )
    else:
        lines.append(f"inputs: not checked ({checked['why']})")
    return lines, problems
