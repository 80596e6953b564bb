"""autorl: train LLM agents with reinforcement learning from a plain-text task description.

The client API follows OpenPipe ART, so ART rollout code runs with ``import autorl as art``.
Names are imported on first use, so ``import autorl`` does not load torch until a trainer is needed.
"""

import importlib

_EXPORTS = {
    "AutoRLError": "errors",
    "LocalBackend": "backend",
    "Model": "model",
    "ServerConfig": "vllm_server",
    "TrainConfig": "config",
    "TrainableModel": "model",
    "TrainerConfig": "config",
    "Trajectory": "trajectories",
    "TrajectoryGroup": "trajectories",
    "gather_trajectory_groups": "gather",
}
__all__ = sorted(_EXPORTS)
_SUBMODULES = {"langgraph"}
"""Reachable as attributes (`art.langgraph.wrap_rollout`), as in ART; imported on first use."""


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name not in _EXPORTS:
        raise AttributeError(f"module 'autorl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
