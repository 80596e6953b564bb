"""The baseline stage's artifact: the base model's judged answers to the validation inputs."""

from __future__ import annotations

from autorl.trajectories import Trajectory

from . import evaluation
from .run import RunArtifacts

NAME = "baseline"


def answers_by_input(ctx: RunArtifacts) -> dict[str, list[Trajectory]]:
    """The base model's judged answers in this stage's artifact, by the validation input they answer."""
    answers: dict[str, list[Trajectory]] = {}
    for group in evaluation.load_groups(ctx.artifact(NAME)):
        for trajectory in group.trajectories:
            answers.setdefault(trajectory.metadata["input"], []).append(trajectory)
    return answers


VARIANT = "base"
