"""The inputs stage's artifact: the task's inputs, each with its split (train or validation), and where they came
from (for MCP•RL scenarios, each input's difficulty from 1 to 5)."""

from __future__ import annotations

from collections import Counter

from autorl.inputs.files import read_inputs_jsonl

from .run import RunArtifacts

NAME = "inputs"
FILE = "inputs.jsonl"


def load(ctx: RunArtifacts, split: str) -> list[str]:
    """The inputs of one split ("train" or "val") from this stage's artifact."""
    return [row.input for row in read_inputs_jsonl(ctx.artifact(NAME) / FILE) if row.split == split]


def section(ctx: RunArtifacts, sample: int = 5) -> list[str]:
    """The report's Inputs section: the counts, for MCP•RL scenarios what wrote them and how many have each
    difficulty, and the first `sample` training inputs (each with its difficulty, where it has one)."""
    rows = read_inputs_jsonl(ctx.artifact(NAME) / FILE)
    train = [row for row in rows if row.split == "train"]
    lines = [f"## Inputs ({len(train)} train, {len(rows) - len(train)} validation; a sample)", ""]
    levels = Counter(row.difficulty for row in rows if isinstance(row.difficulty, int))
    if levels:
        counts = ", ".join(f"{level}: {levels[level]}" for level in sorted(levels))
        lines += [
            f"MCP•RL scenarios written by `{rows[0].generator}` from the MCP servers' tools and resources; inputs by "
            f"difficulty (1: one tool call, to 5: many steps): {counts}.",
            "",
        ]
    shown = [f" (difficulty {row.difficulty})" if isinstance(row.difficulty, int) else "" for row in train]
    return [*lines, *[f"- {row.input}{level}" for row, level in zip(train[:sample], shown, strict=False)], ""]
