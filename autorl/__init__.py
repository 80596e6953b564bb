"""autorl: train LLM agents with reinforcement learning from a plain-text task description.

The client API follows OpenPipe ART, so ART rollout code runs with ``import autorl as art``: the names below,
and ART's module paths (``autorl.langgraph``, ``autorl.local``, ``autorl.rewards``, ``autorl.utils``,
``autorl.dev``, ``autorl.types``; docs/python-api.md lists them). Names are imported on first use, so ``import autorl`` does
not load torch until a trainer is needed. The library's packages: ``backends`` (where a model is served
and trained), ``serving`` (vLLM, the embedded model), ``training`` (the trainer and the loss), ``agents``
(the agent loop, tools, MCP, LangGraph), ``inputs`` (generation, checks, dedup).

Importing autorl registers its embedded model with ruler, so the spec ``"embedded"`` names it there, and on a
CPython with gh-106905 guards ``ast.parse`` against its thread race (`autorl.ast_parse`).
"""

import importlib
import sys as _sys
import types as _types

from autorl import ast_parse as _ast_parse
from ruler.endpoint import ModelEndpoint as _ModelEndpoint
from ruler.endpoint import register_embedded as _register_embedded

_ast_parse.guard()

_EXPORTS = {
    "AutoRLError": "errors",
    "LocalServingUnavailableError": "errors",
    "LocalTrainResult": "types",
    "LoRAConfig": "dev",
    "MetricDefinition": "pipeline_config",
    "PIPELINE_RL_DASHBOARD_DEFAULT_METRICS": "pipeline_config",
    "PIPELINE_RL_METRIC_DEFINITIONS": "pipeline_config",
    "PIPELINE_RL_SCORE_METRICS": "pipeline_config",
    "PipelineAutotuneConfig": "pipeline_config",
    "PipelineRuntimeConfig": "pipeline_config",
    "ServerlessTrainResult": "types",
    "Backend": "backends.base",
    "ClusterBackend": "backends.cluster.backend",
    "ClusterConfig": "backends.cluster.config",
    "LocalBackend": "backends.local",
    "Messages": "types",
    "RemoteBackend": "backends.remote.client",
    "ServerlessBackend": "backends.remote.client",
    "MessagesAndChoices": "types",
    "Model": "model",
    "PipelineTrainer": "pipeline_trainer",
    "ServerConfig": "serving.config",
    "TrainConfig": "config",
    "TrainResult": "types",
    "TrainSFTConfig": "types",
    "TrainableModel": "model",
    "Tools": "types",
    "TrainerConfig": "config",
    "Trajectory": "trajectories",
    "TrajectoryGroup": "trajectories",
    "gather_trajectories": "gather",
    "gather_trajectory_groups": "gather",
    "trajectory_group_batches": "gather",
    "RolloutState": "agents.tool_state",
    "retry": "utils.retry",
    **{
        name: "capture.scopes"
        for name in (
            "auto_trajectory",
            "capture_auto_trajectory",
            "capture_yielded_trajectory",
            "current_trajectory",
            "no_capture",
            "trajectory",
            "trajectory_group",
            "yield_trajectory",
        )
    },
}
__all__ = sorted(_EXPORTS)
_SUBMODULES = {
    "dev",
    "langgraph",
    "local",
    "mcp",
    "megatron",
    "pipeline_trainer",
    "rewards",
    "skypilot",
    "tinker",
    "types",
    "utils",
}
"""Reachable as attributes (`art.langgraph.wrap_rollout`, `art.dev.InternalModelConfig`), as in ART; imported on
first use."""
_TINKER = "see `autorl.tinker`: autorl has no Tinker backend; use LocalBackend, ClusterBackend or RemoteBackend"
_REFUSED = {
    **dict.fromkeys(("TinkerBackend", "TinkerNativeBackend"), _TINKER),
    **dict.fromkeys(
        (
            "MegatronRuntimeConfig",
            "MegatronTopologyConfig",
            "get_megatron_runtime_config",
            "init_megatron_runtime_config",
        ),
        "see `autorl.megatron`: autorl has no Megatron trainer; LocalBackend trains a LoRA on one machine, "
        "ClusterBackend data-parallel on Ray",
    ),
    "SkyPilotBackend": "see `autorl.skypilot`: autorl has no SkyPilot backend; run `autorl serve` there and use RemoteBackend",
}
"""ART's names autorl does not have, each with what to use instead (`NotInAutoRLError`, never AttributeError)."""


def _module_path(name: str, names: tuple[str, ...], doc: str) -> None:
    """ART's module path `art.<name>` for capture names that autorl keeps in `capture.scopes`, made a module only in
    `sys.modules`: `from autorl.auto_trajectory import auto_trajectory` works, and `autorl.auto_trajectory` stays the
    function, as in ART (a module file of that name would replace the function once imported)."""

    def attribute(attr: str) -> object:
        if attr not in names:
            raise AttributeError(f"module 'autorl.{name}' has no attribute {attr!r}")
        return getattr(importlib.import_module(".capture.scopes", __name__), attr)

    module = _types.ModuleType(f"autorl.{name}", doc)
    module.__all__ = list(names)
    module.__getattr__ = attribute
    _sys.modules[module.__name__] = module


_module_path("auto_trajectory", ("auto_trajectory", "capture_auto_trajectory"), "ART's 2025 capture module path.")
_module_path("yield_trajectory", ("yield_trajectory", "capture_yielded_trajectory"), "ART's yield_trajectory path.")


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _REFUSED:
        from .errors import NotInAutoRLError

        raise NotInAutoRLError(f"autorl.{name}: {_REFUSED[name]}")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'autorl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


class _EmbeddedModel:
    """What ruler's `"embedded"` spec means once autorl is imported: autorl's embedded base model, on the
    shared server of `autorl.serving.embedded` (started on first use) or a cluster's replicas of it."""

    def endpoint(self) -> _ModelEndpoint:
        from .serving.embedded import embedded_endpoint

        return embedded_endpoint()

    def context_tokens(self) -> int:
        from .serving.config import ServerConfig

        return ServerConfig().max_model_len


_register_embedded(_EmbeddedModel())
