"""Past one machine: the policy served by N vLLM replicas and trained by one trainer or several
data-parallel ones, each a Ray actor.

`ClusterBackend` is a `ModelBackend` (autorl/backends/model_backend.py) like `LocalBackend`: the same training
loop and run layout (`checkpoints/NNNN/`, `history.jsonl`), so a run on a cluster resumes, reports and
benchmarks as a local one does. Its `ClusterPlacement` differs:

- inference: `ClusterConfig.replicas` `ReplicaActor`s, each a `VLLMServer` on its node (one GPU each on
  CUDA, `replica_cpus` CPUs otherwise). The model's clients send to a virtual host that `RoutingTransport`
  routes to the replica with the fewest requests outstanding (`ReplicaPool`); a request that a replica
  refuses or cuts off is sent again to another one at once, while the pool restarts the dead one.
- training: `ClusterConfig.trainer_workers` `TrainerActor`s (one by default), each holding a `GRPOTrainer`;
  each step they get the scored groups, and (rank 0) return the checkpoint's files, which the driver writes
  under the run directory as `LocalBackend` does. Several train data-parallel: each a share of the step's
  sequences, gradients averaged by torch's DDP (`autorl.training.data_parallel`); a dead one makes the driver
  redo the step on new workers from the newest checkpoint (`ClusterTrainer`).
- the embedded judge and generator: the embedded model's plain weights on `judge_replicas` replicas of their
  own, started when first asked for, routed and recovered the same way; LiteLLM (the judge's and the generator's calls) takes a URL, so
  `PoolProxy` (autorl/backends/cluster/proxy.py) serves the pool at a local address, which `embedded_endpoint` returns.
- freshness: after a step the LoRA (adapter files only, 9.8 MB for the embedded model at rank 8) goes into
  Ray's object store once and every replica loads it from there before the next rollouts start; a replica
  becomes routable again only once it serves the newest step. The object store, not a shared directory:
  it needs no filesystem shared by the nodes, each node pulls the bytes once, and a replica restarted
  later reads the same reference.

Ray is imported only when a `ClusterBackend` is made; the config (`ClusterConfig`), the routing
(`ReplicaPool`, `RoutingTransport`), the actors, joining Ray (`ray_cluster`) and the trainer (`trainer`) live
beside this module (`pip install -e ".[ray]"`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ruler.endpoint import EMBEDDED, ModelEndpoint

from ...errors import AutoRLError
from ...serving.config import ServerConfig
from ...serving.embedded import DEFAULT_BASE_MODEL, cache_dir, serve_embedded_with
from ...training.checkpoints import checkpoint_name, missing_checkpoint
from ..base import inference_name
from ..model_backend import ModelBackend
from .actors import ReplicaActor
from .config import ClusterConfig
from .fit import actor_resources, check_fits, uses_gpus
from .proxy import PoolProxy
from .ray_cluster import connect, stop_actors
from .routing import Replica, ReplicaPool, RoutingTransport
from .trainer import ClusterTrainer

if TYPE_CHECKING:
    from ...model import TrainableModel

log = logging.getLogger("autorl")

VIRTUAL_HOST = "autorl-replicas.invalid"
"""The host in a cluster model's base URL: `RoutingTransport` replaces it with a replica's address, and a
client that bypasses the transport fails to resolve it instead of reaching a replica unrouted."""
ROUTED_KEY = "autorl-routed"
"""What a cluster model's clients send as their key: it never leaves this process, as `RoutingTransport` sends
each replica its own key in its place."""
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
"""What of a checkpoint the replicas need (the optimizer state stays with the driver)."""


class ClusterServing:
    """One model's replicas: every one serves the step last published before it is routed to again."""

    def __init__(
        self,
        model: TrainableModel,
        run_dir: Path,
        replicas: list[Replica],
        placement: ClusterPlacement,
        config: ServerConfig,
    ):
        self.model_name = model.name
        self.base_model = model.base_model
        self.run_dir = run_dir
        self.merged = config.serves_merged()
        self.base_url = f"http://{VIRTUAL_HOST}/v1"
        self.api_key = ROUTED_KEY
        self._wait_s = config.startup_timeout_s
        self._adapter_ref: Any = None
        """The object-store reference of the LoRA files the replicas serve (None: the base model)."""
        self._served_name = ""
        self.pool = ReplicaPool(
            replicas,
            load=self._load,
            restart=placement.restart,
            max_restarts=config.max_restarts,
            name=model.name,
        )

    def transport(self) -> RoutingTransport:
        return RoutingTransport(self.pool, self._wait_s)

    async def _load(self, replica: Replica, step: int) -> None:
        await replica.handle.load.remote(step, self._served_name, self._adapter_ref)

    async def serve(self, step: int) -> str:
        """Make every replica serve checkpoint `step` (0: the base model) before the next request; returns
        the name to request it under."""
        import ray

        if self.pool.step == step:
            return self._served_name
        files = None
        if step > 0:
            path = self.run_dir / "checkpoints" / checkpoint_name(step)
            if not all((path / name).is_file() for name in ADAPTER_FILES):
                raise missing_checkpoint(self.model_name, step, self.run_dir / "checkpoints")
            files = {name: (path / name).read_bytes() for name in ADAPTER_FILES}
        self._adapter_ref = None if files is None else ray.put(files)
        if self.merged:
            self._served_name = self.model_name
        else:
            self._served_name = inference_name(self.model_name, step) if step else self.base_model
        await self.pool.publish(step)
        return self._served_name

    async def retire(self, step: int) -> None:
        """Nothing to free: a replica replaces its adapter when it loads the next one."""

    def served_steps(self) -> set[int]:
        return {self.pool.step} if self.pool.step > 0 else set()

    async def recover(self) -> bool:
        """False: the replicas recover by themselves (`ReplicaPool`), and a request the router gave up on (after
        trying every replica) is not sent again."""
        return False

    def close(self) -> None:
        self.pool.cancel_recoveries()
        stop_actors([r.handle for r in self.pool.replicas])


class ClusterPlacement:
    """Models served by vLLM replica actors and trained by a trainer actor on a Ray cluster, and the embedded
    model's replicas for the embedded judge and generator (see this module's docstring)."""

    def __init__(self, cluster: ClusterConfig, server: ServerConfig):
        if cluster.ray is None:
            raise AutoRLError("ClusterBackend needs ClusterConfig.ray (an address, 'auto' or 'local')")
        import ray

        connect(cluster)
        self.cluster_resources = dict(ray.cluster_resources())
        """What the cluster holds (Ray's `cluster_resources`), from which placement decides (`fit`)."""
        check_fits(cluster, self.cluster_resources, with_judge=False)  # the judge's replicas: when first asked for
        self.cluster = cluster
        self.server_config = server
        self.remote_server_starts = 0
        self._embedded: PoolProxy | None = None
        """The address of the embedded model's replicas (`embedded_endpoint`), once asked for."""
        self.embedded_pool: ReplicaPool | None = None
        serve_embedded_with(self.embedded_endpoint)

    @property
    def gpus(self) -> bool:
        """Whether replicas and trainer workers take a GPU each: the cluster has GPUs (`fit.uses_gpus`)."""
        return uses_gpus(self.cluster_resources)

    def resources(self, cpus: int) -> dict:
        return actor_resources(self.cluster_resources, cpus)

    async def start_serving(self, model: TrainableModel, run_dir: Path) -> ClusterServing:
        import ray

        config = self.server_config.with_overrides(model.server)
        merged = config.serves_merged()
        if merged and sum(node["Alive"] for node in ray.nodes()) > 1:
            raise AutoRLError(
                "merged LoRA serving keeps each vLLM server on loopback, which a multi-node cluster's driver cannot "
                "reach; use --lora-serving adapter"
            )
        served = model.name if merged else model.base_model
        logs = [run_dir / "logs" / f"vllm-replica-{index}.log" for index in range(self.cluster.replicas)]
        replicas = await self.start_replicas(model.base_model, served, config, logs)
        return ClusterServing(model, run_dir, replicas, self, config)

    def trainer(self, model: TrainableModel, run_dir: Path) -> ClusterTrainer:
        return ClusterTrainer(model, run_dir, self)

    async def start_replicas(
        self, base_model: str, served: str, server: ServerConfig, logs: list[Path]
    ) -> list[Replica]:
        """One `ReplicaActor` per log path, serving `base_model` as `served` (each started before the next on
        CPU); on a failure or cancellation the ones started are stopped."""
        import ray

        driver_node = ray.get_runtime_context().get_node_id()
        actor = ray.remote(ReplicaActor).options(
            max_restarts=server.max_restarts, max_task_retries=0, **self.resources(self.cluster.replica_cpus)
        )
        handles = []
        try:
            for log_path in logs:
                handles.append(
                    actor.remote(base_model, served, server, str(log_path), self.cluster.replica_cpus, driver_node)
                )
                self.remote_server_starts += 1
                if not self.gpus:  # one after another: on CPU each sizes its KV cache from the memory left
                    await handles[-1].endpoint.remote()
            endpoints = await asyncio.gather(*(handle.endpoint.remote() for handle in handles))
        except BaseException:  # a replica that failed to start, or Ctrl-C: the others stop too
            stop_actors(handles)
            raise
        return [
            Replica(index, handle, url=url, key=key)
            for index, (handle, (url, key)) in enumerate(zip(handles, endpoints, strict=True))
        ]

    def embedded_endpoint(self) -> ModelEndpoint:
        """The embedded model's plain weights on `judge_replicas` replicas, behind a local `PoolProxy`: where the
        embedded judge and generator send (`autorl.serving.embedded.embedded_endpoint` asks here, from a worker
        thread). Started on the first call, which blocks until every replica serves."""
        proxy = self._embedded
        if proxy is None:
            check_fits(self.cluster, self.cluster_resources, with_judge=True)
            proxy = self._embedded = PoolProxy("autorl-embedded-proxy")  # known to `close` while it starts
            count = self.cluster.judge_replicas or self.cluster.replicas
            logs = [cache_dir() / "logs" / f"embedded-vllm-{os.getpid()}-replica-{i}.log" for i in range(count)]
            try:
                proxy.run(self._start_embedded(proxy, logs))
            except BaseException:  # a replica failed to start, or `close` cancelled the start
                proxy.close()
                self._embedded = None
                raise
        return ModelEndpoint(model=DEFAULT_BASE_MODEL, base_url=proxy.base_url, api_key=proxy.api_key)

    @property
    def embedded_proxy(self) -> PoolProxy | None:
        """The local address of the embedded model's replicas, once started."""
        return self._embedded

    async def _start_embedded(self, proxy: PoolProxy, logs: list[Path]) -> None:
        server = ServerConfig()  # as a local run's embedded server: the judge's context is its max_model_len
        replicas = await self.start_replicas(DEFAULT_BASE_MODEL, DEFAULT_BASE_MODEL, server, logs)
        self.embedded_pool = ReplicaPool(
            replicas, load=_plain_weights, restart=self.restart, max_restarts=server.max_restarts, name=EMBEDDED
        )
        await self.embedded_pool.publish(0)
        await proxy.serve(RoutingTransport(self.embedded_pool, server.startup_timeout_s), f"http://{VIRTUAL_HOST}")

    async def restart(self, replica: Replica) -> str:
        """Bring a replica's server back: Ray restarts an actor whose process died (rerunning `__init__`);
        the actor restarts a server that died under it. Returns its URL; its key is set on `replica`."""
        import ray

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.server_config.startup_timeout_s
        while True:
            try:
                url, replica.key, started = await replica.handle.ensure_running.remote()
                self.remote_server_starts += started  # a request that failed on a live server starts nothing
                return url
            except ray.exceptions.ActorUnavailableError:  # Ray is restarting the actor (its __init__ starts vLLM)
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(1)

    def close(self) -> None:
        """Stop the embedded model's replicas and their proxy (the models' own stop with their slots)."""
        if self._embedded is not None:
            self._embedded.close()  # cancels a start or recovery under way (first: a start holds embedded's lock)
            self._embedded = None
        serve_embedded_with(None)
        if self.embedded_pool is not None:
            stop_actors([r.handle for r in self.embedded_pool.replicas])
            self.embedded_pool = None


async def _plain_weights(replica: Replica, step: int) -> None:
    """The embedded model's replicas serve its plain weights from their start (and restart): nothing to load."""


class ClusterBackend(ModelBackend):
    """A `ModelBackend` whose models are served by `cluster.replicas` vLLM replicas and trained by one trainer,
    each a Ray actor (see this module's docstring)."""

    def __init__(
        self,
        path: str | os.PathLike = ".autorl",
        *,
        cluster: ClusterConfig,
        server: ServerConfig | None = None,
        layout: Literal["art", "run"] = "art",
    ):
        self.server_config = server or ServerConfig()
        self.cluster = cluster
        super().__init__(path, ClusterPlacement(cluster, self.server_config), layout)
