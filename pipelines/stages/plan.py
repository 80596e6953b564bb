"""Stage `plan`: the training aids a run takes, decided from what the checks before training measured.

The preflight stage's learnability sample is the base model answering training inputs under the run's settings,
judged. From it (`evidence`) the plan decides (`decide`), each decision one line with its evidence:

- **forced first calls** (`rollout.tool_choice` "required" for `rollout.required_share` of each group's answers):
  a task with tools whose base answers call a tool in fewer than `FEW_CALLS` of them. A model that never calls
  gives every group the same 0, and a forced call is the only way a group holds one that reached the tool; the
  share left unforced weighs the call against what the model does unaided (held-out answers are never forced).
- **strict tool grammar** (`rollout.strict_tools`): where calls are forced, or where more than `UNPARSED_CALLS` of
  the calls begun never ran (the arguments or the block did not parse).
- **a warm-up from the policy's own successes** (`sft.bootstrap`, rejection sampling): where no base answer of the
  sample succeeded (`SUCCESS`), so that GRPO's groups would all tie at the bottom; it answers `WARM_UP_INPUTS`
  training inputs under the aids above and fine-tunes on each group's best answer that succeeds (none found:
  no warm-up, and the run says so). Not where the judge audit did not find the judge reliable (its best answers
  would be noise), nor with `--backend` (the server trains; the sft stage says so).

Answers cut at `max_tokens` in over `CUT` of the sample are said, and the cap kept: the held-out answers are
compared with the base model's at the cap these were sampled at.

Under `MIN_ANSWERS` judged answers (a small `--learnability-groups` x `--group-size`) the plan keeps the defaults.

The search for a differing answer within a step (`RunConfig.tie_search`) and its budget need no decision: a step
spends it only where its groups tie. A setting the user gave (a flag, or a task file's table) always wins: the
plan keeps it and says so. With `--preflight off` nothing was measured, and the plan keeps the defaults. The
stage's artifact is `plan.json`; the stages after it run under `planned` (the run's config with the decisions),
and their keys follow this stage's, so a cached run trains under the plan it made.
"""

from __future__ import annotations

import json
from typing import Any

from autorl.task import TaskSpec
from autorl.trajectories import Trajectory, TrajectoryGroup, truncated  # not the trainer's module: torch, transformers

from ..config import RunConfig
from ..evaluation import SUCCESS
from ..records import preflight
from ..records.plan import FILE, NAME, planned
from ..stage_context import StageContext

UPSTREAM = ("preflight",)
FEW_CALLS = 0.25
"""Under this share of base answers that call a tool, calls are forced. The directory task (a fact only its tool
knows): 0 of 32 base answers called, and it was learned at 3 of 3 seeds only with calls forced for half of each
group and strict tools (0.003 -> 0.83-0.95, `results/learning_tool_directory_share40_s*.json`); unaided, its
training reward stayed 0 for 20 steps."""
UNPARSED_CALLS = 0.2
"""Over this share of begun calls that never ran, tool calls are held to their schema (strict tools)."""
MIN_ANSWERS = 16
"""Fewer judged base answers than this are too few to plan from (half the default learnability sample, 4 groups
of 8): the plan keeps the defaults and says so."""
CUT = 0.25
"""Over this share of base answers cut at `max_tokens`, the plan says so (and keeps the cap: see `decide`)."""
WARM_UP_INPUTS = 32
"""Training inputs the planned warm-up answers (`group_size` answers each): 256 answers at the defaults, where
tic-tac-toe's 128 found 1-2 won games."""


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    """The settings the plan may decide, as the user gave them (a given one is kept)."""
    return {"given": sorted(given_settings(config)), "tools": task.has_tools()}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


def given_settings(config: RunConfig) -> set[str]:
    """The settings the plan decides that the user gave (flags or task tables), as dotted names."""
    given = {f"rollout.{name}" for name in config.rollout.model_fields_set}
    given |= {f"sft.{name}" for name in config.sft.model_fields_set}
    return given & DECIDED


DECIDED = {"rollout.tool_choice", "rollout.required_share", "rollout.strict_tools", "sft.bootstrap", "sft.file"}
"""The settings a plan may set."""


def evidence(groups: list[TrajectoryGroup]) -> dict[str, Any]:
    """What the plan reads from judged groups of base answers: how many answers, the share that succeeded, that
    called a tool (a tool's result is in the conversation), that began a call that never ran, and that a turn of
    was cut at max_tokens."""
    answers = [t for g in groups for t in g.trajectories]
    began = [t for t in answers if began_a_call(t)]
    ran = sum(called_a_tool(t) for t in answers)
    count = len(answers) or 1
    return {
        "answers": len(answers),
        "success_rate": sum(t.reward >= SUCCESS for t in answers) / count,
        "call_rate": ran / count,
        "unparsed_rate": sum(not called_a_tool(t) for t in began) / len(began) if began else 0.0,
        "cut_rate": sum(truncated(t) for t in answers) / count,
    }


def called_a_tool(trajectory: Trajectory) -> bool:
    return any(m.get("role") == "tool" for m in trajectory.messages())


def began_a_call(trajectory: Trajectory) -> bool:
    """Whether an assistant turn called a tool or began a call in its text (`<tool_call>`)."""
    return any(
        m.get("role") == "assistant" and (m.get("tool_calls") or "<tool_call>" in (m.get("content") or ""))
        for m in trajectory.messages()
    )


def decide(seen: dict[str, Any] | None, config: RunConfig, tools: bool) -> dict[str, Any]:
    """The plan from `seen` (`evidence`, None when nothing was measured): `updates` to the config (nested, as
    `RunConfig` fields) and one `lines` entry per decision, each with its evidence."""
    given = given_settings(config)
    updates: dict[str, dict[str, Any]] = {}
    lines: list[str] = []
    if seen is None:
        return {"updates": {}, "lines": ["nothing measured (--preflight off): the defaults, no aid"]}
    if seen["answers"] < MIN_ANSWERS:
        line = f"only {seen['answers']} base answers were judged before training (under {MIN_ANSWERS}): the defaults"
        return {"updates": {}, "lines": [line]}

    def take(setting: str, value: Any, why: str) -> None:
        table, name = setting.split(".")
        if setting in given:
            lines.append(f"{why}; you set --{setting.split('.')[1].replace('_', '-')}: kept")
            return
        updates.setdefault(table, {})[name] = value
        lines.append(f"{why}: {flag(setting, value)}")

    if tools:
        calls = f"{seen['call_rate']:.0%} of {seen['answers']} base answers call a tool"
        forced = seen["call_rate"] < FEW_CALLS
        if forced:
            take("rollout.tool_choice", "required", f"{calls} (under {FEW_CALLS:.0%}), so the first turn of "
                 f"{config.rollout.required_share:.0%} of each group's answers is forced to call")  # fmt: skip
        else:
            lines.append(f"{calls}: calls are not forced")
        unparsed = seen["unparsed_rate"] > UNPARSED_CALLS
        if forced or unparsed:
            why = (
                f"{seen['unparsed_rate']:.0%} of begun calls never ran (over {UNPARSED_CALLS:.0%})"
                if unparsed
                else "calls are forced"
            )
            take("rollout.strict_tools", True, why)
    if seen["cut_rate"] > CUT:  # evidence only: a longer cap would change what is compared with the base
        lines.append(
            f"{seen['cut_rate']:.0%} of base answers were cut at --max-tokens {config.rollout.max_tokens}: kept (the "
            "held-out answers are compared at the base's cap; a task whose answers need more says so in its text)"
        )
    success = f"{seen['success_rate']:.0%} of {seen['answers']} base answers succeed (score >= {SUCCESS})"
    if seen["success_rate"] > 0:
        lines.append(f"{success}: no warm-up, GRPO has successes to learn from")
    elif seen.get("judge", "reliable") != "reliable":
        lines.append(f"{success}; no warm-up: the judge is not reliable ({seen['judge']}), its best answers are noise")
    elif "sft.file" in given or "sft.bootstrap" in given:
        lines.append(f"{success}; you set the warm-up: kept")
    else:
        take("sft.bootstrap", WARM_UP_INPUTS, f"{success}, so every group would tie at the bottom")
    return {"updates": updates, "lines": lines}


def flag(setting: str, value: Any) -> str:
    """A decision as the flag that would make it: `--tool-choice required`, `--strict-tools`."""
    name = "--" + ("sft-" if setting.startswith("sft.") else "") + setting.split(".")[1].replace("_", "-")
    return name if value is True else f"{name} {value}"


async def run(ctx: StageContext) -> dict[str, Any]:
    checks = preflight.load(ctx)
    if checks.get("off"):
        seen = None
    else:
        sample = ctx.artifact(preflight.NAME) / preflight.SAMPLE
        seen = evidence([TrajectoryGroup.model_validate_json(line) for line in sample.read_text().splitlines()])
        seen["judge"] = checks["audit"].get("verdict", "reliable")  # the judge audit's: a warm-up needs a judge
    summary = {"evidence": seen, **decide(seen, ctx.config, ctx.task.has_tools())}
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        (out / FILE).write_text(json.dumps(summary, indent=1))
    return summary


def gate(ctx: StageContext, summary: dict[str, Any]) -> None:
    """Print the plan (cached or not), and run the stages after it under it."""
    for line in summary["lines"]:
        ctx.console.print(f"plan: {line}", highlight=False)
    ctx.config = planned(ctx.config, summary)
