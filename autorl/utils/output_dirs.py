"""ART's `art.utils.output_dirs`: where a model trained through the ART API lives on disk.

A backend's `path` (ART's `art_path`) holds `<project>/models/<name>/`, the model's directory, with
`checkpoints/NNNN/` (a PEFT LoRA each; `0000`, written at registration, stands for the base model),
`trajectories/<split>/NNNN.parquet` (what `model.log` recorded, in ART's parquet format:
`autorl.utils.trajectory_logging`), `history.jsonl` (a line per training step), `log_history.jsonl` (a line per
`model.log`) and `logs/`. `LocalBackend` and `ClusterBackend` lay models out so by default; `autorl run` keeps its
own run layout (`<path>/<project>/<name>/`, `ModelBackend(layout="run")`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model import Model

DEFAULT_ART_PATH = ".autorl"
"""`LocalBackend()`'s default `path`, relative to the working directory (ART's is `<repository root>/.art`)."""


def get_default_art_path() -> str:
    """The path a `LocalBackend()` made without one uses: `.autorl` in the working directory."""
    return os.path.abspath(DEFAULT_ART_PATH)


def get_models_dir(project_name: str, art_path: str | None = None) -> str:
    """`<art_path>/<project>/models`: the directories of a project's models."""
    return f"{art_path or get_default_art_path()}/{project_name}/models"


def get_output_dir_from_model_properties(project: str, name: str, art_path: str | None = None) -> str:
    """`<art_path>/<project>/models/<name>`: a model's directory, from its project and name."""
    return f"{get_models_dir(project, art_path)}/{name}"


def get_model_dir(model: Model, art_path: str | None = None) -> str:
    """`<art_path>/<project>/models/<name>`: `model`'s directory."""
    return get_output_dir_from_model_properties(model.project, model.name, art_path)


def get_step_checkpoint_dir(model_output_dir: str, step: int) -> str:
    """`<model dir>/checkpoints/NNNN`: checkpoint `step`'s directory."""
    return f"{model_output_dir}/checkpoints/{step:04d}"


def get_trajectories_dir(model_output_dir: str) -> str:
    """`<model dir>/trajectories`: what `model.log` recorded, a directory per split."""
    return f"{model_output_dir}/trajectories"


def get_trajectories_split_dir(model_output_dir: str, split: str) -> str:
    """`<model dir>/trajectories/<split>`: a split's `NNNN.parquet` files, one per step logged."""
    return f"{model_output_dir}/trajectories/{split}"
