"""The inputs stage's artifact: the task's inputs, each with its split (train or validation)."""

from __future__ import annotations

from autorl.inputs.files import read_inputs_jsonl

from .run import RunArtifacts

NAME = "inputs"
FILE = "inputs.jsonl"


def load(ctx: RunArtifacts, split: str) -> list[str]:
    """The inputs of one split ("train" or "val") from this stage's artifact."""
    return [row.input for row in read_inputs_jsonl(ctx.artifact(NAME) / FILE) if row.split == split]
