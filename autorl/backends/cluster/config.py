"""`ClusterConfig`: where a run's inference and training run on Ray (replicas, CPUs), or this process when no
cluster is named; importable without Ray or the cluster's code. (An `autorl serve` elsewhere is not a placement
of ours: the run's `backend` URL names it, `pipelines.config.RunConfig.backend`.)"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ClusterConfig(BaseModel):
    """Where inference and training run: this process (the default) or a Ray cluster (`ray`), and how the
    cluster's work is placed."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)  # field docstrings are CLI help

    ray: str | None = None
    """Ray cluster to run on: "local" starts one on this machine, "auto" joins the one this machine belongs
    to, "HOST:PORT" the one at that address. None (the default): no Ray; one local vLLM server and the trainer
    in this process (`LocalBackend`). Needs `pip install -e ".[ray]"`."""
    replicas: int = Field(1, ge=1)
    """vLLM replicas serving the policy on the cluster; rollouts go to the least busy one."""
    replica_cpus: int = Field(1, ge=1)
    """CPUs Ray reserves for each replica on a machine without CUDA, and the threads it computes with (on
    CUDA each replica takes one GPU)."""
    judge_replicas: int | None = Field(None, ge=1)
    """vLLM replicas serving the embedded model's plain weights to the embedded judge and input generator
    (`--judge embedded`, `--generator embedded`), started when one of them first asks; each call goes to the
    least busy one. None: as many as `replicas`. A judge or generator elsewhere (an API, a URL) is not moved."""
    trainer_cpus: int = Field(1, ge=1)
    """CPUs Ray reserves for the trainer on a machine without CUDA, and torch's threads there (on CUDA the
    trainer takes one GPU). Replicas wait while the trainer runs, so on one machine it may count the same
    cores as the replicas: `ray="local"` makes the cluster as large as these reservations ask (the embedded
    model's replicas included)."""

    @field_validator("ray")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("ray://"):
            raise ValueError(
                "Ray Client addresses (ray://) are not supported: run autorl on a cluster node (e.g. with "
                "`ray job submit`) and give its GCS address or 'auto'"
            )
        return value
