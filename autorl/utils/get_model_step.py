"""ART's `art.utils.get_model_step`: a model's newest step read from its directory, without a backend."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .output_dirs import get_model_dir

if TYPE_CHECKING:
    from ..model import TrainableModel


def get_step_from_dir(output_dir: str) -> int:
    """The highest `checkpoints/NNNN` step under a model directory `output_dir` (0 when it has none)."""
    checkpoints = os.path.join(output_dir, "checkpoints")
    if not os.path.isdir(checkpoints):
        return 0
    steps = [int(d) for d in os.listdir(checkpoints) if d.isdigit() and os.path.isdir(os.path.join(checkpoints, d))]
    return max(steps, default=0)


def get_model_step(model: TrainableModel, art_path: str) -> int:
    """`model`'s newest step in ART's layout under `art_path` (a `LocalBackend`'s `path`)."""
    return get_step_from_dir(get_model_dir(model, art_path))
