"""The system_prompt stage's artifact: the policy's system prompt and how it was chosen."""

from __future__ import annotations

import json
from typing import Any

from .run import RunArtifacts

NAME = "system_prompt"
FILE = "system_prompt.json"


def load(ctx: RunArtifacts) -> str:
    """The system prompt in this stage's artifact."""
    return json.loads((ctx.artifact(NAME) / FILE).read_text())["system_prompt"]


def load_check(ctx: RunArtifacts) -> dict[str, Any] | None:
    """How the prompt was chosen (the stage's `choose`) in this stage's artifact; None for a prompt given by the task."""
    return json.loads((ctx.artifact(NAME) / FILE).read_text()).get("check")


def check_audit(ctx: RunArtifacts) -> tuple[str, dict[str, Any] | None]:
    """Where, and the judge audit the system prompt check recorded (None where it audited nothing): the `earlier`
    audit of the stages after it (`steps.groups.judge_audit`)."""
    return "system prompt check", (load_check(ctx) or {}).get("audit")


TASK, GENERATED, EXAMPLES = "task", "generated", "examples"
"""The candidates' names: the task text, the generator's prompt, the task text with worked examples."""

CANDIDATE_NAMES = {TASK: "the task text", GENERATED: "the generated prompt", EXAMPLES: "the task text with examples"}


def check_line(check: dict[str, Any]) -> str:
    """The choice in one sentence, for the console and the report."""
    if not check.get("checked"):
        return f"the task text is the system prompt, no other prompt was checked: {check['why']}"
    scored = []
    for name, score in check["scores"].items():
        gain = check["gains"].get(name)
        interval = f" ({gain[0]:+.3f} [{gain[1]:+.3f}, {gain[2]:+.3f}])" if gain else ""
        scored.append(f"{CANDIDATE_NAMES[name]} {score:.3f}{interval}")
    return (
        f"checked on {check['inputs']} training inputs ({check['judge']} judge), mean score and gain over the task "
        f"text with its 95% interval: {'; '.join(scored)}; kept {CANDIDATE_NAMES[check['kept']]}"
    )
