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

Ray is imported only here and only when a `ClusterBackend` is made; the config (`ClusterConfig`), the
routing (`ReplicaPool`, `RoutingTransport`) and the actors live beside this module (`pip install -e ".[ray]"`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruler.endpoint import EMBEDDED, ModelEndpoint

from ...atomic import atomic_dir
from ...config import TrainConfig
from ...errors import AutoRLError
from ...serving.config import ServerConfig, cuda_available
from ...serving.embedded import DEFAULT_BASE_MODEL, cache_dir, serve_embedded_with
from ...training.checkpoints import checkpoint_name, latest_checkpoint, missing_checkpoint
from ...trajectories import Trajectory, TrajectoryGroup
from ...types import TrainSFTConfig
from ..base import inference_name
from ..model_backend import ModelBackend
from .actors import ReplicaActor, TrainerActor, read_files, write_files
from .config import ClusterConfig
from .proxy import PoolProxy
from .routing import Replica, ReplicaPool, RoutingTransport

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
STOP_TIMEOUT_S = 30.0
"""How long `ClusterBackend.close` waits for the actors to stop their servers before it kills them."""
LOCAL_SYSTEM_CONFIG = {"kill_child_processes_on_worker_exit": False}
"""Ray settings of a cluster that `ray="local"` starts. By default Ray SIGKILLs an actor's child processes when
the actor's worker exits; a replica's child is the supervisor of its vLLM server (`die_with_parent.py`),
which, killed so, cannot end the server's engine process (left running, measured). Left alone, the
supervisor sees the actor die and ends the server's whole process group. On a cluster started with
`ray start`, set RAY_kill_child_processes_on_worker_exit=0 in the nodes' environment for the same."""
TRAINER_RESTARTS = 2
"""How many times a step is redone on new trainer workers after one died (`ClusterTrainer`)."""
PLACEMENT_TIMEOUT_S = 120.0
"""How long a data-parallel trainer's workers may wait for the cluster to place them all."""
DEATH_WAIT_S = 10.0
"""How long a failed step waits for the other workers' answers: a worker's death is reported to the driver
within seconds, and it is the cause to act on, not the error it caused on a rank waiting for it."""
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


class ClusterTrainer:
    """The trainer of one model: `ClusterConfig.trainer_workers` `TrainerActor`s started from the newest
    checkpoint (one: a single actor; more: the ranks of a data-parallel trainer, in a placement group so that
    all start or none, joined into one torch process group, `autorl.training.data_parallel`). Each step's
    checkpoint files come back from rank 0 and are written under the run directory here.

    A worker that dies (its process killed, its node lost) fails the step on every rank: the workers are
    ended, a new set starts from the newest checkpoint under the run directory (the one before the step, as
    the step's own is written only once every rank has finished it) and the step is redone with the same
    groups, up to `TRAINER_RESTARTS` times: no group is lost or trained twice."""

    def __init__(self, model: TrainableModel, run_dir: Path, placement: ClusterPlacement):
        self.run_dir = run_dir
        self.base_model = model.base_model
        self.trainer_config = model.trainer
        self.cluster = placement.cluster
        self._resources = placement.resources(self.cluster.trainer_cpus)
        self.restarts = 0
        """How many times the workers were started again after one died."""
        self.actors: list[Any] = []
        self._group: Any = None
        """The placement group of a data-parallel trainer's workers."""
        self._joined = False

    def _start(self) -> None:
        """Start the workers from the newest checkpoint (a data-parallel trainer's join their process group
        next, `_join`)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        latest = latest_checkpoint(self.run_dir / "checkpoints")
        done, files = (latest[0], read_files(latest[1])) if latest else (0, None)
        workers = self.cluster.trainer_workers
        options = {"max_restarts": 0, **self._resources}
        if workers > 1:
            bundle = {"GPU": 1} if "num_gpus" in self._resources else {"CPU": self.cluster.trainer_cpus}
            self._group = ray.util.placement_group([bundle] * workers, strategy="PACK")
        files_ref = ray.put(files)  # once into the object store, whatever the number of workers
        for rank in range(workers):
            if self._group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(self._group, rank)
            actor = ray.remote(TrainerActor).options(**options)
            cpus = self.cluster.trainer_cpus
            self.actors.append(actor.remote(self.base_model, self.trainer_config, cpus, files_ref, done, rank, workers))
        self._joined = workers == 1

    async def _join(self) -> None:
        """Once the placement group is placed, every worker joins the process group at rank 0's address."""
        if self._joined:
            return
        try:
            await asyncio.wait_for(self._group.ready(), PLACEMENT_TIMEOUT_S)
        except TimeoutError:
            raise AutoRLError(
                f"the Ray cluster did not place the {len(self.actors)} trainer workers (--trainer-workers) in "
                f"{PLACEMENT_TIMEOUT_S:.0f} s: its {'GPUs' if 'num_gpus' in self._resources else 'CPUs'} are "
                "held by other actors; ask for fewer or free them"
            ) from None
        address = await self.actors[0].address.remote()
        await asyncio.gather(*(actor.join.remote(address, len(self.actors)) for actor in self.actors))
        self._joined = True

    async def step(self, groups: list[TrajectoryGroup], config: TrainConfig, step: int) -> dict:
        return self._written(await self._on_every_worker("step", groups, config, step), step)

    async def sft(self, trajectories: list[Trajectory], config: TrainSFTConfig, step: int) -> dict:
        return self._written(await self._on_every_worker("sft", trajectories, config, step), step)

    async def _on_every_worker(self, method: str, *args: Any) -> tuple[dict, dict[str, bytes]]:
        """Rank 0's answer to `method(*args)` run on every worker, redone on new workers when one died. After
        any failure the workers are replaced (the next call starts new ones from the newest checkpoint): a
        failed step may have left them apart, one waiting in a collective or holding a part-made update."""
        import ray

        for attempt in range(TRAINER_RESTARTS + 1):
            if not self.actors:
                self._start()
            try:
                await self._join()
                calls = [asyncio.ensure_future(getattr(actor, method).remote(*args)) for actor in self.actors]
                return (await _all_or_death(calls))[0]
            except ray.exceptions.RayActorError as death:  # ActorUnavailableError too
                self._stop()
                if death.actor_init_failed:  # not a death: the trainer cannot start (its error says why)
                    raise
                if attempt == TRAINER_RESTARTS:
                    raise AutoRLError(
                        f"a trainer worker died {attempt + 1} times in step {args[-1]}, the last time: {death}"
                    ) from None
                log.warning("a trainer worker died (%s); step %d is redone from the newest checkpoint", death, args[-1])
                self.restarts += 1
            except BaseException:
                self._stop()
                raise
        raise AssertionError("unreachable")

    def _written(self, answer: tuple[dict, dict[str, bytes]], step: int) -> dict:
        """The step's metrics, once the checkpoint files the actor sent are written under the run directory."""
        metrics, files = answer
        with atomic_dir(self.run_dir / "checkpoints" / checkpoint_name(step)) as tmp:
            write_files(files, tmp)
        return metrics

    def _stop(self) -> None:
        import ray

        if self.actors:
            stop_actors(self.actors)
            self.actors = []
        if self._group is not None:
            ray.util.remove_placement_group(self._group)
            self._group = None

    def close(self) -> None:
        self._stop()


async def _all_or_death(calls: list[asyncio.Future]) -> list[Any]:
    """Every call's result. On a failure, a worker's death (`RayActorError`) is raised rather than what it
    caused on the others (a rank waiting for it in a collective fails, or waits on), if one is reported within
    `DEATH_WAIT_S`; else the first failure."""
    import ray

    try:
        _, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_EXCEPTION)
        if pending:  # one failed: the others' answers, or their deaths, for a moment
            await asyncio.wait(pending, timeout=DEATH_WAIT_S)
        failures = [c.exception() for c in calls if c.done() and c.exception() is not None]
        if failures:
            raise next((f for f in failures if isinstance(f, ray.exceptions.RayActorError)), failures[0])
        return [c.result() for c in calls]
    finally:
        for call in calls:
            call.cancel()


def check_trainer_fits(cluster: ClusterConfig) -> None:
    """One error line when the Ray cluster has fewer CPUs (GPUs on CUDA) in all than the policy's replicas and
    the `trainer_workers` ask for together (they hold them at once)."""
    import ray

    if cluster.trainer_workers == 1:
        return
    kind, each = ("GPU", 1) if cuda_available() else ("CPU", cluster.trainer_cpus)
    replicas = cluster.replicas * (1 if cuda_available() else cluster.replica_cpus)
    needed = cluster.trainer_workers * each + replicas
    total = int(ray.cluster_resources().get(kind, 0))
    if needed > total:
        raise AutoRLError(
            f"--trainer-workers {cluster.trainer_workers} needs {cluster.trainer_workers * each} {kind}s ({each} "
            f"each) beside the replicas' {replicas}: {needed} in all, and the Ray cluster has {total}"
        )


class ClusterPlacement:
    """Models served by vLLM replica actors and trained by a trainer actor on a Ray cluster, and the embedded
    model's replicas for the embedded judge and generator (see this module's docstring)."""

    def __init__(self, cluster: ClusterConfig, server: ServerConfig):
        if cluster.ray is None:
            raise AutoRLError("ClusterBackend needs ClusterConfig.ray (an address, 'auto' or 'local')")
        connect(cluster)
        check_trainer_fits(cluster)
        self.cluster = cluster
        self.server_config = server
        self.remote_server_starts = 0
        self._embedded: PoolProxy | None = None
        """The address of the embedded model's replicas (`embedded_endpoint`), once asked for."""
        self.embedded_pool: ReplicaPool | None = None
        serve_embedded_with(self.embedded_endpoint)

    def resources(self, cpus: int) -> dict:
        return {"num_gpus": 1} if cuda_available() else {"num_cpus": cpus}

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
                if not cuda_available():  # one after another: on CPU each sizes its KV cache from the memory left
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

        self.remote_server_starts += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.server_config.startup_timeout_s
        while True:
            try:
                url, replica.key = await replica.handle.ensure_running.remote()
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
    ):
        self.server_config = server or ServerConfig()
        self.cluster = cluster
        super().__init__(path, ClusterPlacement(cluster, self.server_config))
