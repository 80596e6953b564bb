"""autorl: train LLM agents with reinforcement learning from a plain-text task description.

The client API follows OpenPipe ART, so ART rollout code runs with ``import autorl as art``.
"""

from .backend import LocalBackend
from .config import TrainConfig, TrainerConfig
from .errors import AutoRLError
from .gather import gather_trajectory_groups
from .model import Model, TrainableModel
from .trajectories import Trajectory, TrajectoryGroup
from .vllm_server import ServerConfig

__all__ = [
    "AutoRLError",
    "LocalBackend",
    "Model",
    "ServerConfig",
    "TrainConfig",
    "TrainableModel",
    "TrainerConfig",
    "Trajectory",
    "TrajectoryGroup",
    "gather_trajectory_groups",
]
