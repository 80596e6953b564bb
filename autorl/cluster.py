"""Past one machine: the policy served by N vLLM replicas and trained by one trainer, each a Ray actor.

`ClusterBackend` has `LocalBackend`'s surface (`register`, `train`, `serve_checkpoint`, `get_step`, `close`)
and its run layout (`checkpoints/NNNN/`, `history.jsonl`), so a run on a cluster resumes, reports and
benchmarks as a local one does. What differs:

- inference: `ClusterConfig.replicas` `ReplicaActor`s, each a `VLLMServer` on its node (one GPU each on
  CUDA, `replica_cpus` CPUs otherwise). The model's clients send to a virtual host that `RoutingTransport`
  routes to the replica with the fewest requests outstanding (`ReplicaPool`); a request that a replica
  refuses or cuts off is sent again to another one at once, while the pool restarts the dead one.
- training: one `TrainerActor` holds the `GRPOTrainer`; each step it gets the scored groups and returns the
  checkpoint's files, which the driver writes under the run directory as `LocalBackend` does.
- the embedded judge and generator: the embedded model's plain weights on `judge_replicas` replicas of their
  own, started when first asked for, routed and recovered the same way; LiteLLM and DSPy take a URL, so
  `PoolProxy` (autorl/pool_proxy.py) serves the pool at a local address, which `embedded_endpoint` returns.
- freshness: after a step the LoRA (adapter files only, 9.8 MB for the embedded model at rank 8) goes into
  Ray's object store once and every replica loads it from there before the next rollouts start; a replica
  becomes routable again only once it serves the newest step. The object store, not a shared directory:
  it needs no filesystem shared by the nodes, each node pulls the bytes once, and a replica restarted
  later reads the same reference.

Ray is imported only here and only when a `ClusterBackend` is made (`pip install -e ".[ray]"`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ruler.endpoint import EMBEDDED, ModelEndpoint

from .atomic import atomic_dir
from .backend import (
    LOCAL_API_KEY,
    LocalBackend,
    append_history,
    ensure_writable,
    inference_name,
    reconcile_history,
    warn_untrained,
)
from .checkpoints import checkpoint_name, latest_checkpoint
from .config import TrainConfig, TrainerConfig
from .embedded import DEFAULT_BASE_MODEL, cache_dir, serve_embedded_with
from .errors import AutoRLError, ServerDiedError
from .model import CUT_OFF, RECOVERY_RETRIES, unless_engine_died
from .pool_proxy import PoolProxy
from .trajectories import TrajectoryGroup
from .vllm_server import ServerConfig, cuda_available

if TYPE_CHECKING:
    from .model import TrainableModel

log = logging.getLogger("autorl")

VIRTUAL_HOST = "autorl-replicas.invalid"
"""The host in a cluster model's base URL: `RoutingTransport` replaces it with a replica's address, and a
client that bypasses the transport fails to resolve it instead of reaching a replica unrouted."""
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
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20
"""Object store of a cluster that `ray="local"` starts: Ray's default is 30 % of RAM; a LoRA is megabytes."""


class ClusterConfig(BaseModel):
    """Where inference and training run: this process (the default) or a Ray cluster."""

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


# --- routing: which replica answers a request -------------------------------------------------------------

ReplicaState = Literal["starting", "ready", "recovering", "dead"]


@dataclass(eq=False)
class Replica:
    """What the driver knows of one replica."""

    index: int
    handle: Any = None
    """The Ray actor (None in tests and the simulation)."""
    url: str = ""
    """Base URL of its server, without /v1."""
    state: ReplicaState = "starting"
    served_step: int = -1
    """The checkpoint step its server holds (0: the base model; -1: none yet)."""
    outstanding: int = 0
    """Requests sent to it and not yet answered in full."""
    restarts: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while its checkpoint changes or it restarts, so those never overlap."""


class ReplicaPool:
    """The replicas of one model, the step they must serve, and the choice of a replica per request.

    `pick` takes a replica that is ready and serves `step`, the one with the fewest requests outstanding
    (ties in turn), so no request reaches a stale checkpoint and the load spreads evenly; `failed` takes a
    replica out of the choice and recovers it in the background: `restart(replica)` (returns its new URL)
    then `load(replica, step)`. The two callables are the only I/O, so the simulation in
    benchmarks/perf/replica_simulation.py drives this same class.
    """

    def __init__(
        self,
        replicas: list[Replica],
        load: Callable[[Replica, int], Awaitable[None]],
        restart: Callable[[Replica], Awaitable[str]],
        max_restarts: int = 3,
        name: str = "model",
    ):
        self.replicas = replicas
        self.step = -1
        """The step every request must be answered by (set by `publish`)."""
        self._load = load
        self._restart = restart
        self.max_restarts = max_restarts
        self.name = name
        self._turn = itertools.count()
        self._changed = asyncio.Event()
        self._recoveries: set[asyncio.Task] = set()

    def pick(self) -> Replica | None:
        """The ready, up-to-date replica with the fewest outstanding requests (counted as sent), or None."""
        ready = [r for r in self.replicas if r.state == "ready" and r.served_step == self.step]
        if not ready:
            return None
        turn = next(self._turn)
        least = min(r.outstanding for r in ready)
        tied = [r for r in ready if r.outstanding == least]
        chosen = tied[turn % len(tied)]
        chosen.outstanding += 1
        return chosen

    def release(self, replica: Replica) -> None:
        replica.outstanding -= 1

    async def acquire(self, timeout: float) -> Replica:
        """A replica to send one request to (`pick`), waiting up to `timeout` s for one to become ready."""
        deadline = asyncio.get_running_loop().time() + timeout
        while (chosen := self.pick()) is None:
            if all(r.state == "dead" for r in self.replicas):
                raise ServerDiedError(f"every vLLM replica of {self.name!r} died more than {self.max_restarts} times")
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise ServerDiedError(f"no vLLM replica of {self.name!r} became ready within {timeout:.0f} s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return chosen

    def _notify(self) -> None:
        self._changed.set()

    async def publish(self, step: int) -> None:
        """Make `step` the one served: from now on only replicas serving it are picked; returns once every
        live replica loaded it (one that fails to is recovered in the background) and one serves it."""
        self.step = step
        live = [r for r in self.replicas if r.state in ("ready", "starting")]
        await asyncio.gather(*(self._catch_up_or_recover(r) for r in live))
        while not any(r.state == "ready" and r.served_step == step for r in self.replicas):
            if all(r.state == "dead" for r in self.replicas):
                raise ServerDiedError(f"every vLLM replica of {self.name!r} died more than {self.max_restarts} times")
            self._changed.clear()
            await self._changed.wait()

    async def _catch_up(self, replica: Replica) -> None:
        """Load the current step into `replica` (again if `publish` moved on meanwhile), then route to it."""
        async with replica.lock:
            while replica.served_step != self.step:
                step = self.step
                await self._load(replica, step)
                replica.served_step = step
            replica.state = "ready"
        self._notify()

    async def _catch_up_or_recover(self, replica: Replica) -> None:
        try:
            await self._catch_up(replica)
        except Exception as exc:  # a replica that cannot load is restarted like a dead one
            self.failed(replica, f"loading step {self.step} failed: {type(exc).__name__}: {exc}")

    def failed(self, replica: Replica, reason: str, restarts: int | None = None) -> None:
        """Take `replica` out of routing and restart it in the background (once, however many requests saw it
        fail). `restarts`: its count when the failed request was sent; a failure seen by a request sent before
        a restart is the old server's, and is ignored."""
        if replica.state in ("recovering", "dead") or restarts not in (None, replica.restarts):
            return
        replica.state = "recovering"
        task = asyncio.get_running_loop().create_task(self._recover(replica, reason))
        self._recoveries.add(task)
        task.add_done_callback(self._recoveries.discard)

    async def _recover(self, replica: Replica, reason: str) -> None:
        """Restart `replica` and load the current step into it, up to `max_restarts` times in all; then it is dead."""
        while replica.restarts < self.max_restarts:
            replica.restarts += 1
            log.warning(
                "replica %d of %r died (%s); restarting it (%d of at most %d)",
                replica.index, self.name, reason, replica.restarts, self.max_restarts,
            )  # fmt: skip
            try:
                async with replica.lock:
                    replica.url = await self._restart(replica)
                    replica.served_step = -1
                await self._catch_up(replica)
                return
            except Exception as exc:  # tried again, up to max_restarts
                reason = f"{type(exc).__name__}: {exc}"
        replica.state = "dead"
        log.warning("replica %d of %r is out of the run (%s); the others go on", replica.index, self.name, reason)
        self._notify()

    def cancel_recoveries(self) -> None:
        """Stop the restarts under way (the run is ending)."""
        for task in self._recoveries:
            task.cancel()


class _Released(httpx.AsyncByteStream):
    """A response body that gives its replica's request slot back when it is closed (read in full or not)."""

    def __init__(self, stream: httpx.AsyncByteStream, release: Callable[[], None]):
        self._stream = stream
        self._release = release

    async def __aiter__(self):
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            release, self._release = self._release, lambda: None
            release()


class RoutingTransport(httpx.AsyncBaseTransport):
    """Sends each request to a replica the pool picks, and again to another one if the first was unreachable,
    cut off, or answered that its engine died (the pool restarts that one); other errors and HTTP statuses go
    back to the caller as they are."""

    def __init__(self, pool: ReplicaPool, wait_s: float = 600.0):
        self._pool = pool
        self._wait_s = wait_s
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"host"]
        attempts = RECOVERY_RETRIES + len(self._pool.replicas)
        for attempt in range(1, attempts + 1):
            replica = await self._pool.acquire(self._wait_s)
            restarts = replica.restarts  # which of its servers this request reaches
            try:
                target = httpx.URL(replica.url)
                url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
                routed = httpx.Request(
                    request.method, url, headers=headers, content=body, extensions=request.extensions
                )
                response = await unless_engine_died(await self._inner.handle_async_request(routed), routed)
            except CUT_OFF as exc:
                self._pool.release(replica)
                self._pool.failed(replica, f"{type(exc).__name__} ({exc}) on {request.url.path}", restarts)
                if attempt == attempts:
                    raise
                continue
            except BaseException:
                self._pool.release(replica)
                raise
            stream = _Released(response.stream, lambda r=replica: self._pool.release(r))
            return httpx.Response(
                response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
            )
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self._inner.aclose()


# --- the actors -------------------------------------------------------------------------------------------


def _threads(count: int) -> None:
    """Compute with `count` threads: Ray sets OMP_NUM_THREADS to an actor's CPUs or 1, torch and vLLM read it."""
    os.environ["OMP_NUM_THREADS"] = str(count)
    import torch

    torch.set_num_threads(count)


def _read_files(directory: Path) -> dict[str, bytes]:
    """A checkpoint directory's files (it has no subdirectories), to send to another process."""
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def _write_files(files: dict[str, bytes], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


class ReplicaActor:
    """One vLLM server, of the policy or of the embedded model's plain weights (for the embedded judge and
    generator), on its Ray node (`ray.remote` makes it an actor). Ray reruns `__init__`
    when the actor's process dies, which starts a new server; the server itself dies with the actor
    (`die_with_parent`), SIGKILL included."""

    def __init__(
        self, base_model: str, served_name: str, server: ServerConfig, log_path: str, threads: int, driver_node: str
    ):
        import ray

        from .embedded import resolve_base_model  # on this node: each node converts or finds the model itself
        from .vllm_server import VLLMServer

        _threads(threads)
        if ray.get_runtime_context().get_node_id() != driver_node:  # the driver reaches it over the network
            server = server.model_copy(update={"host": ray.util.get_node_ip_address()})
        self.server = VLLMServer(resolve_base_model(base_model), served_name, Path(log_path), server)
        self.server.start()
        self._adapters = Path(tempfile.mkdtemp(prefix="autorl-replica-"))
        self._step = 0
        """The checkpoint step the server holds (0: the base model, which it starts with)."""
        self._adapter: str | None = None
        """The name of the LoRA loaded as an adapter (adapter serving)."""

    def endpoint(self) -> str:
        return self.server.base_url.removesuffix("/v1")

    def ensure_running(self) -> str:
        """Restart the server if it died or no longer answers its health check (same port; it starts with the
        base model); returns the endpoint."""
        if not self.server.healthy():
            self.server.restart()
            self._step, self._adapter = 0, None
        return self.endpoint()

    def load(self, step: int, name: str, files: dict[str, bytes] | None) -> None:
        """Serve checkpoint `step` from its LoRA `files` (None for step 0: the base model) as `name`: merged
        into the weights, or loaded as an adapter (replacing the one before)."""
        if step == self._step:
            return
        if self.server.merged:
            if files is None:
                self.server.load_merged(None)
            else:
                with tempfile.TemporaryDirectory(dir=self._adapters) as directory:
                    self.server.load_merged(_write_files(files, Path(directory)))
        else:
            if files is not None:
                self.server.load_lora(name, _write_files(files, self._adapters / name))
            if self._adapter is not None:
                self.server.unload_lora(self._adapter)
                shutil.rmtree(self._adapters / self._adapter, ignore_errors=True)
            self._adapter = name if files is not None else None
        self._step = step

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self._adapters, ignore_errors=True)


class TrainerActor:
    """The `GRPOTrainer` on its Ray node; starts from the checkpoint it is given (its files), and returns each
    step's checkpoint as files for the driver to keep."""

    def __init__(
        self, base_model: str, config: TrainerConfig, threads: int, latest: dict[str, bytes] | None, step: int
    ):
        from .embedded import resolve_base_model
        from .trainer import GRPOTrainer

        _threads(threads)
        self._dir = Path(tempfile.mkdtemp(prefix="autorl-trainer-"))
        if latest is not None:
            _write_files(latest, self._dir / checkpoint_name(step))
        self.trainer = GRPOTrainer(resolve_base_model(base_model), self._dir, config)

    def step(self, groups: list[TrajectoryGroup], config: TrainConfig, step: int) -> tuple[dict, dict[str, bytes]]:
        from .trainer import release_freed_memory

        metrics = self.trainer.step(groups, config)
        path = self.trainer.save(step, metrics)
        release_freed_memory()
        files = _read_files(path)
        for old in self._dir.iterdir():  # the trainer resumes from memory; only the newest is kept on disk
            if old != path:
                shutil.rmtree(old, ignore_errors=True)
        return metrics, files

    def stop(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


# --- the backend ------------------------------------------------------------------------------------------


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
    size = max(os.cpu_count() or 1, replicas * config.replica_cpus + config.trainer_cpus)
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


class _ClusterModel:
    """What a `ClusterBackend` holds for one registered model."""

    def __init__(self, run_dir: Path, pool: ReplicaPool):
        self.run_dir = run_dir
        self.pool = pool
        self.trainer: Any = None
        """The TrainerActor, made at the first training step."""
        self.lock = asyncio.Lock()
        self.adapter_ref: Any = None
        """The object-store reference of the LoRA files the replicas serve (None: the base model)."""
        self.served_name = ""


class ClusterBackend(LocalBackend):
    """`LocalBackend`'s runs, with the policy served by `cluster.replicas` vLLM replicas and trained by one
    trainer, each a Ray actor (see this module's docstring)."""

    def __init__(
        self,
        path: str | os.PathLike = ".autorl",
        *,
        cluster: ClusterConfig,
        server: ServerConfig | None = None,
    ):
        super().__init__(path, server=server)
        if cluster.ray is None:
            raise AutoRLError("ClusterBackend needs ClusterConfig.ray (an address, 'auto' or 'local')")
        connect(cluster)
        self.cluster = cluster
        self._models: dict[str, _ClusterModel] = {}  # type: ignore[assignment]  # LocalBackend's, per model
        self._embedded: PoolProxy | None = None
        """The address of the embedded model's replicas (`_embedded_endpoint`), once asked for."""
        self._embedded_pool: ReplicaPool | None = None
        serve_embedded_with(self._embedded_endpoint)

    def _resources(self, cpus: int) -> dict:
        return {"num_gpus": 1} if cuda_available() else {"num_cpus": cpus}

    async def register(self, model: TrainableModel) -> None:
        """Start the model's replicas, serving its newest checkpoint if it has one."""
        import ray

        if model.name in self._models:
            return
        run_dir = self.run_dir(model)
        ensure_writable(run_dir)
        merged = self.server_config.serves_merged()
        if merged and sum(node["Alive"] for node in ray.nodes()) > 1:
            raise AutoRLError(
                "merged LoRA serving keeps each vLLM server on loopback, which a multi-node cluster's driver cannot "
                "reach; use --lora-serving adapter"
            )
        served = model.name if merged else model.base_model
        logs = [run_dir / "logs" / f"vllm-replica-{index}.log" for index in range(self.cluster.replicas)]
        replicas = await self._start_replicas(model.base_model, served, self.server_config, logs)
        state = _ClusterModel(run_dir, None)  # the pool's callables need the state
        state.pool = ReplicaPool(
            replicas,
            load=lambda replica, step: self._load(state, replica, step),
            restart=self._restart,
            max_restarts=self.server_config.max_restarts,
            name=model.name,
        )
        self._models[model.name] = state
        reconcile_history(run_dir)
        model.inference_base_url = f"http://{VIRTUAL_HOST}/v1"
        model.inference_api_key = LOCAL_API_KEY
        model._gate.transport = lambda: RoutingTransport(state.pool, self.server_config.startup_timeout_s)
        latest = latest_checkpoint(run_dir / "checkpoints")
        model.inference_model_name = await self.serve_checkpoint(model, latest[0] if latest else 0)

    async def _start_replicas(
        self, base_model: str, served: str, server: ServerConfig, logs: list[Path]
    ) -> list[Replica]:
        """One `ReplicaActor` per log path, serving `base_model` as `served` (each started before the next on
        CPU); on a failure or cancellation the ones started are stopped."""
        import ray

        driver_node = ray.get_runtime_context().get_node_id()
        actor = ray.remote(ReplicaActor).options(
            max_restarts=server.max_restarts, max_task_retries=0, **self._resources(self.cluster.replica_cpus)
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
            urls = await asyncio.gather(*(handle.endpoint.remote() for handle in handles))
        except BaseException:  # a replica that failed to start, or Ctrl-C: the others stop too
            stop_actors(handles)
            raise
        return [Replica(index, handle, url=url) for index, (handle, url) in enumerate(zip(handles, urls, strict=True))]

    def _embedded_endpoint(self) -> ModelEndpoint:
        """The embedded model's plain weights on `judge_replicas` replicas, behind a local `PoolProxy`: where the
        embedded judge and generator send (`autorl.embedded.embedded_endpoint` asks here, from a worker thread).
        Started on the first call, which blocks until every replica serves."""
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
        return ModelEndpoint(model=DEFAULT_BASE_MODEL, base_url=proxy.base_url)

    async def _start_embedded(self, proxy: PoolProxy, logs: list[Path]) -> None:
        server = ServerConfig()  # as a local run's embedded server: the judge's context is its max_model_len
        replicas = await self._start_replicas(DEFAULT_BASE_MODEL, DEFAULT_BASE_MODEL, server, logs)
        self._embedded_pool = ReplicaPool(
            replicas, load=_plain_weights, restart=self._restart, max_restarts=server.max_restarts, name=EMBEDDED
        )
        await self._embedded_pool.publish(0)
        await proxy.serve(RoutingTransport(self._embedded_pool, server.startup_timeout_s), f"http://{VIRTUAL_HOST}")

    async def _load(self, state: _ClusterModel, replica: Replica, step: int) -> None:
        await replica.handle.load.remote(step, state.served_name, state.adapter_ref)

    async def _restart(self, replica: Replica) -> str:
        """Bring a replica's server back: Ray restarts an actor whose process died (rerunning `__init__`);
        the actor restarts a server that died under it."""
        import ray

        self.remote_server_starts += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.server_config.startup_timeout_s
        while True:
            try:
                return await replica.handle.ensure_running.remote()
            except ray.exceptions.ActorUnavailableError:  # Ray is restarting the actor (its __init__ starts vLLM)
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(1)

    async def serve_checkpoint(self, model: TrainableModel, step: int) -> str:
        """Make every replica serve checkpoint `step` (0: the base model) before the next request; returns
        the name to request it under."""
        import ray

        state = self._state(model)
        if state.pool.step == step:
            return state.served_name
        files = None
        if step > 0:
            path = state.run_dir / "checkpoints" / checkpoint_name(step)
            if not all((path / name).is_file() for name in ADAPTER_FILES):
                raise AutoRLError(f"model {model.name!r} has no checkpoint {checkpoint_name(step)}")
            files = {name: (path / name).read_bytes() for name in ADAPTER_FILES}
        state.adapter_ref = None if files is None else ray.put(files)
        merged = self.server_config.serves_merged()
        state.served_name = model.name if merged else (inference_name(model.name, step) if step else model.base_model)
        await state.pool.publish(step)
        return state.served_name

    async def train(self, model: TrainableModel, groups: list[TrajectoryGroup], config: TrainConfig) -> dict:
        """One GRPO step on the trainer actor; the checkpoint is written here, then served by every replica."""
        import ray

        state = self._state(model)
        async with state.lock:
            model._gate.close()
            try:
                done = await self.get_step(model)
                step = done + 1
                if state.trainer is None:
                    latest = state.run_dir / "checkpoints" / checkpoint_name(done)
                    files = _read_files(latest) if done else None
                    actor = ray.remote(TrainerActor).options(
                        max_restarts=0, **self._resources(self.cluster.trainer_cpus)
                    )
                    state.trainer = actor.remote(
                        model.base_model, model.trainer, self.cluster.trainer_cpus, files, done
                    )
                metrics, files = await state.trainer.step.remote(groups, config, step)
                warn_untrained(step, groups, metrics)
                with atomic_dir(state.run_dir / "checkpoints" / checkpoint_name(step)) as tmp:
                    _write_files(files, tmp)
                append_history(state.run_dir, {"step": step, **metrics})
                model.inference_model_name = await self.serve_checkpoint(model, step)
            finally:
                model._gate.open()
        return {"step": step, **metrics}

    async def recover(self, model: TrainableModel) -> bool:
        """Whether requests to the model may be sent again: its replicas recover by themselves (`ReplicaPool`)."""
        return model.name in self._models

    def close(self) -> None:
        """Stop the replicas (the embedded model's too) and the trainer (their servers end with them)."""
        if self._embedded is not None:
            self._embedded.close()  # cancels a start or recovery under way (first: a start holds embedded's lock)
            self._embedded = None
        serve_embedded_with(None)
        if self._embedded_pool is not None:
            stop_actors([r.handle for r in self._embedded_pool.replicas])
            self._embedded_pool = None
        for state in self._models.values():
            state.pool.cancel_recoveries()
            stop_actors([r.handle for r in state.pool.replicas] + ([state.trainer] if state.trainer else []))
        self._models.clear()
        super().close()


async def _plain_weights(replica: Replica, step: int) -> None:
    """The embedded model's replicas serve its plain weights from their start (and restart): nothing to load."""


def stop_actors(actors: list[Any]) -> None:
    """Let each actor stop what it started (a restarting one cannot), then end them."""
    import ray

    stops = [actor.stop.remote() for actor in actors]
    ray.wait(stops, num_returns=len(stops), timeout=STOP_TIMEOUT_S)
    for actor in actors:
        ray.kill(actor, no_restart=True)


def make_backend(path: str | os.PathLike, server: ServerConfig, cluster: ClusterConfig) -> LocalBackend:
    """A `ClusterBackend` when `cluster.ray` names a cluster, else a `LocalBackend`."""
    if cluster.ray is None:
        return LocalBackend(path, server=server)
    return ClusterBackend(path, cluster=cluster, server=server)
