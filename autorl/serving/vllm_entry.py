"""vLLM's OpenAI-compatible server, started so that its engine process is forked, not spawned (CPU).

vLLM's CPU platform sets `VLLM_WORKER_MULTIPROC_METHOD=spawn` in its config step, where it also adds libraries
to `LD_PRELOAD` (PyTorch's libgomp, so OpenMP binds threads to every core, and vLLM's tcmalloc where the build
ships it), which only take effect in a process started anew. Spawning makes the engine process import vLLM a
second time, about a third of a server's start on a 2-core CPU. autorl's server process is
started with those libraries already in `LD_PRELOAD` (`preloads`, set by `VLLMServer.environment`), so the
engine process gets them either way, and here the start method goes back to fork once vLLM's config step
has run: the engine process begins with vLLM imported (`benchmarks/perf/perf_server_start.py` measures the
two, with decode speed).

Run as `python -m autorl.serving.vllm_entry ARGS...`, with the arguments of
`python -m vllm.entrypoints.openai.api_server` (`ServerConfig.cpu_fork`). `preloads` imports nothing, so the
parent need not import vLLM or torch to compute it.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import runpy
from pathlib import Path

VLLM_SERVER = "vllm.entrypoints.openai.api_server"
"""vLLM's OpenAI-compatible server module, which this one runs."""
OPENMP_LIBRARIES = ("libomp", "libgomp", "libiomp")
"""Names vLLM's CPU platform takes as an OpenMP library already preloaded."""


def _package_dir(name: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).parent if spec and spec.origin else None


def preloads() -> list[str]:
    """The shared libraries vLLM's CPU platform puts in `LD_PRELOAD` (vLLM's tcmalloc first, then PyTorch's
    libgomp), as found in the installed packages; the ones not installed are left out."""
    found = []
    vllm = _package_dir("vllm")
    if vllm is not None:
        for pattern in ("libtcmalloc_minimal*.so*", "libtcmalloc.so*"):
            if hits := sorted(glob.glob(str(vllm / "libs" / pattern))):
                found.append(hits[0])
                break
    torch = _package_dir("torch")
    if torch is not None:
        hits = sorted(glob.glob(str(torch.parent / "torch.libs" / "libgomp*.so*")))
        hits += sorted(glob.glob(str(torch / "lib" / "libgomp*.so*")))
        found += hits[:1]
    return found


def with_preloads(ld_preload: str) -> str:
    """`ld_preload` (an `LD_PRELOAD` value) with `preloads()` added where a library of its kind is missing."""
    entries = [entry for entry in ld_preload.split(":") if entry]
    for library in preloads():
        kinds = ("libtcmalloc",) if "libtcmalloc" in library else OPENMP_LIBRARIES
        if not any(kind in entry for kind in kinds for entry in entries):
            entries.append(library)
    return ":".join(entries)


def _preloaded_openmp() -> bool:
    """Whether this process started with an OpenMP library in `LD_PRELOAD` (vLLM's test for its own)."""
    return any(kind in os.environ.get("LD_PRELOAD", "") for kind in OPENMP_LIBRARIES)


def _fork_after_config() -> None:
    """Make vLLM's CPU platform leave the engine process's start method at fork after its config step."""
    from vllm.platforms.cpu import CpuPlatform

    if not _preloaded_openmp():
        return  # the OpenMP library vLLM wants takes effect only in a process it spawns
    configure = CpuPlatform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config) -> None:  # noqa: ANN001 (vLLM's own signature)
        configure(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


if __name__ == "__main__":
    _fork_after_config()
    runpy.run_module(VLLM_SERVER, run_name="__main__", alter_sys=True)
