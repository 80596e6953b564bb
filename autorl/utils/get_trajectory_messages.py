"""`get_trajectory_messages`: a trajectory's conversation as plain chat messages (ART's
`art.utils.get_trajectory_messages`), the policy's `Choice`s as assistant messages with their tool calls."""

from __future__ import annotations

from typing import Any

from ..trajectories import Trajectory


def get_trajectory_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """`trajectory.messages()`, under ART's function name."""
    return trajectory.messages()
