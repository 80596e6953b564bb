"""Whether a cluster run's actors fit the Ray cluster, decided from what the cluster reports
(`ray.cluster_resources()`), not from this process's machine: a driver on a CPU-only head node still places its
replicas and trainers on the workers' GPUs, and a run that cannot be placed fails in one line instead of its
actors waiting for resources forever. Importable without Ray: each decision is a function of the resources."""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import AutoRLError
from .config import ClusterConfig


def uses_gpus(resources: Mapping[str, float]) -> bool:
    """Whether the cluster's actors take GPUs (one each): any GPU in the cluster (`resources`:
    `ray.cluster_resources()`), wherever the driver runs."""
    return resources.get("GPU", 0) >= 1


def actor_resources(resources: Mapping[str, float], cpus: int) -> dict[str, float]:
    """What a replica or trainer worker asks Ray for: one GPU on a cluster with GPUs, else `cpus` CPUs."""
    return {"num_gpus": 1} if uses_gpus(resources) else {"num_cpus": cpus}


def check_fits(cluster: ClusterConfig, resources: Mapping[str, float], with_judge: bool) -> None:
    """One `AutoRLError` line when the cluster (`resources`: `ray.cluster_resources()`) has fewer GPUs (CPUs on a
    cluster without GPUs) than the policy's replicas, the trainer's workers and, `with_judge`, the embedded
    model's replicas ask for together: they hold them at once, and Ray would keep the last ones waiting."""
    gpus = uses_gpus(resources)
    kind = "GPU" if gpus else "CPU"
    replica_each, trainer_each = (1, 1) if gpus else (cluster.replica_cpus, cluster.trainer_cpus)
    judges = (cluster.judge_replicas or cluster.replicas) if with_judge else 0
    parts = {
        f"{cluster.replicas} policy replica(s)": cluster.replicas * replica_each,
        f"{cluster.trainer_workers} trainer worker(s)": cluster.trainer_workers * trainer_each,
        **({f"{judges} embedded judge replica(s)": judges * replica_each} if judges else {}),
    }
    needed = sum(parts.values())
    total = int(resources.get(kind, 0))
    if needed > total:
        asked = ", ".join(f"{name} {count}" for name, count in parts.items())
        raise AutoRLError(
            f"the Ray cluster has {total} {kind}s and the run needs {needed} at once ({asked}); lower --replicas, "
            f"--trainer-workers or --judge-replicas, or judge with a model elsewhere"
        )
