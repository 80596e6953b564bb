"""The sft stage's artifact: the SFT warm-up's summary, and the model step RL starts at after it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..artifacts import MANIFEST
from .run import RunArtifacts

if TYPE_CHECKING:
    from ..config import RunConfig

NAME = "sft"


def skipped(config: RunConfig) -> str | None:
    """Why the stage has nothing to do (no file, no bootstrap), or None."""
    return None if config.sft.file is not None or config.sft.bootstrap else "no --sft-file or --sft-bootstrap"


def load(ctx: RunArtifacts) -> dict[str, Any]:
    """The warm-up's summary (`steps`, `conversations`, `epochs`, `file`, `final_loss`); empty without one, or
    before it is complete."""
    path = ctx.artifact(NAME) / MANIFEST if not skipped(ctx.config) else None
    if path is None or not path.is_file():
        return {}
    manifest = json.loads(path.read_text())
    return {name: value for name, value in manifest.items() if name not in ("stage", "key")}


def first_rl_step(ctx: RunArtifacts) -> int:
    """The model step RL starts at: 1, or the one after the warm-up's steps."""
    return load(ctx).get("steps", 0) + 1
