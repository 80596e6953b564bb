"""The plan stage's artifact (`FILE`: the evidence, the decisions as config updates, one line each), the run's
config under it (`planned`) and the report's section on it (`section`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .run import RunArtifacts

if TYPE_CHECKING:
    from ..config import RunConfig

NAME, FILE = "plan", "plan.json"


def load(ctx: RunArtifacts) -> dict[str, Any]:
    """The plan (`evidence`, `updates`, `lines`); empty where the run has none (recorded before plans)."""
    path = ctx.artifact(NAME) / FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def planned(config: RunConfig, plan: dict[str, Any]) -> RunConfig:
    """`config` with the plan's `updates` (nested: `{"rollout": {"tool_choice": "required"}}`) applied."""
    tables = {
        table: getattr(config, table).model_copy(update=values) for table, values in plan.get("updates", {}).items()
    }
    return config.model_copy(update=tables)


def section(decided: dict[str, Any]) -> list[str]:
    """The report's "The plan": the aids the run took, each with its evidence; none for a run without a plan."""
    if not decided:
        return []
    lines = [f"- {line}" for line in decided["lines"]]
    return ["## The plan", "", "Decided from the base model's answers before training:", "", *lines, ""]
