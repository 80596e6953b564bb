"""The sft stage's artifact: the SFT warm-up's summary, and the model step RL starts at after it."""

from __future__ import annotations

import json
from typing import Any

from ..artifacts import MANIFEST
from .run import RunArtifacts

NAME = "sft"


def load(ctx: RunArtifacts) -> dict[str, Any]:
    """The warm-up's summary (`steps`, `conversations`, `epochs`, `file`, `final_loss`); empty without one, or
    before it is complete."""
    path = ctx.artifact(NAME) / MANIFEST if ctx.config.sft.file is not None else None
    if path is None or not path.is_file():
        return {}
    manifest = json.loads(path.read_text())
    return {name: value for name, value in manifest.items() if name not in ("stage", "key")}


def first_rl_step(ctx: RunArtifacts) -> int:
    """The model step RL starts at: 1, or the one after the warm-up's steps."""
    return load(ctx).get("steps", 0) + 1
