"""`ClusterConfig`: where a run's inference and training run on Ray (replicas, CPUs), or this process when no
cluster is named; importable without Ray or the cluster's code. (An `autorl serve` elsewhere is not a placement
of ours: the run's `backend` URL names it, `pipelines.config.RunConfig.backend`.)"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


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
    """CPUs Ray reserves for each replica on a cluster without GPUs, and the threads it computes with (on a
    cluster with GPUs, as `ray.cluster_resources()` reports them, each replica takes one GPU)."""
    judge_replicas: int | None = Field(None, ge=1)
    """vLLM replicas serving the embedded model's plain weights to the embedded judge and input generator
    (`--judge embedded`, `--generator embedded`), started when one of them first asks; each call goes to the
    least busy one. None: as many as `replicas`. A judge or generator elsewhere (an API, a URL) is not moved."""
    trainer_cpus: int = Field(1, ge=1)
    """CPUs Ray reserves for the trainer (each of its `trainer_workers`) on a cluster without GPUs, and torch's
    threads there (on a cluster with GPUs a trainer worker takes one GPU). Replicas wait while the trainer runs, so on one machine it may count the same
    cores as the replicas: `ray="local"` makes the cluster as large as these reservations ask (the embedded
    model's replicas included)."""
    trainer_workers: int = Field(1, ge=1)
    """Trainer actors training the LoRA data-parallel: each holds the same LoRA and AdamW state, trains a
    share of each step's sequences (split by token counts) and DDP averages their gradients (gloo on CPU,
    NCCL on CUDA), so N workers make the update one makes; rank 0 writes the checkpoint. Each takes
    `trainer_cpus` CPUs (one GPU on CUDA). 1 (the default): one trainer actor, no process group. More than
    the cluster can place at once, with the policy's replicas, is an error when the backend starts (the embedded
    judge's replicas counted too when they are first asked for: `autorl.backends.cluster.fit`)."""

    @model_validator(mode="after")
    def _workers_need_ray(self) -> ClusterConfig:
        if self.trainer_workers > 1 and self.ray is None:
            raise ValueError(
                "trainer_workers > 1 trains on a Ray cluster: give ray too (--ray local, auto or an address)"
            )
        return self

    @field_validator("ray")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("ray://"):
            raise ValueError(
                "Ray Client addresses (ray://) are not supported: run autorl on a cluster node (e.g. with "
                "`ray job submit`) and give its GCS address or 'auto'"
            )
        return value
