"""The preflight stage's artifact: its figures (`FILE`) and the learnability sample (`SAMPLE`), and the training
inputs its action on tied groups leaves."""

from __future__ import annotations

import json
from typing import Any

from .run import RunArtifacts

NAME = "preflight"
FILE, SAMPLE = "preflight.json", "learnability.jsonl"


def kept_inputs(train_inputs: list[str], action: dict[str, Any] | None) -> list[str]:
    """The training inputs left after the learnability check's action (all of them without one)."""
    dropped = set(action["dropped"]) if action else set()
    return [text for text in train_inputs if text not in dropped]


def load(ctx: RunArtifacts) -> dict[str, Any]:
    """The stage's figures (`{"off": true}` when it was off)."""
    return json.loads((ctx.artifact(NAME) / FILE).read_text())
