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
    """Why the stage has nothing to do, or None: a file or a bootstrap was given, or the run's plan may call for a
    bootstrap (`pipelines.stages.plan`: the user set neither, and the checks ran)."""
    if config.sft.file is not None or config.sft.bootstrap:
        return None
    if "bootstrap" in config.sft.model_fields_set:
        return "--sft-bootstrap 0"
    if config.preflight == "off":
        return "no --sft-file or --sft-bootstrap, and nothing measured to plan one (--preflight off)"
    return None


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
