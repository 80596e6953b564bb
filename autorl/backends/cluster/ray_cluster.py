"""Joining the Ray cluster (`connect`: an address, or a local one that `ray="local"` starts, with the
settings its replicas need) and ending the actors a cluster run started (`stop_actors`): what the cluster's
serving and training share, apart from `backend` so both import it from one place."""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from ...errors import AutoRLError
from .config import ClusterConfig

STOP_TIMEOUT_S = 30.0
"""How long `ClusterBackend.close` waits for the actors to stop their servers before it kills them."""
LOCAL_SYSTEM_CONFIG = {"kill_child_processes_on_worker_exit": False}
"""Ray settings of a cluster that `ray="local"` starts. By default Ray SIGKILLs an actor's child processes when
the actor's worker exits; a replica's child is the supervisor of its vLLM server (`die_with_parent.py`),
which, killed so, cannot end the server's engine process (left running, measured). Left alone, the
supervisor sees the actor die and ends the server's whole process group. On a cluster started with
`ray start`, set RAY_kill_child_processes_on_worker_exit=0 in the nodes' environment for the same."""
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20
"""Object store of a cluster that `ray="local"` starts: Ray's default is 30 % of RAM; a LoRA is megabytes."""


def connect(config: ClusterConfig) -> None:
    """Join (or for "local" start) the Ray cluster, once per process; keeps this process's SIGTERM handler,
    which `ray.init` replaces (the CLI cancels its run on SIGTERM)."""
    try:
        import ray
    except ImportError:
        raise AutoRLError('--ray needs Ray: pip install -e ".[ray]"') from None
    if ray.is_initialized():
        return
    local = config.ray == "local"
    replicas = config.replicas + (config.judge_replicas or config.replicas)  # the policy's, the embedded model's
    size = max(os.cpu_count() or 1, replicas * config.replica_cpus + config.trainer_workers * config.trainer_cpus)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(
            address=config.ray,
            namespace="autorl",
            logging_level=logging.WARNING,
            **(
                {
                    "num_cpus": size,
                    "include_dashboard": False,
                    "object_store_memory": LOCAL_OBJECT_STORE_BYTES,
                    "_system_config": LOCAL_SYSTEM_CONFIG,
                }
                if local
                else {}
            ),
        )
    except ConnectionError as exc:
        raise AutoRLError(f"cannot reach the Ray cluster at {config.ray!r}: {exc}") from None
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def stop_actors(actors: list[Any]) -> None:
    """Let each actor stop what it started (a restarting one cannot), then end them."""
    import ray

    stops = [actor.stop.remote() for actor in actors]
    ray.wait(stops, num_returns=len(stops), timeout=STOP_TIMEOUT_S)
    for actor in actors:
        ray.kill(actor, no_restart=True)
