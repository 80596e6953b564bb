"""The Ray actors of a cluster run: `ReplicaActor` (one vLLM server on its node) and `TrainerActor` (the
`GRPOTrainer` on its node); made into actors by `ray.remote` in `autorl.backends.cluster.backend` and `.trainer`. Ray is not
imported at module level: the actors' modules load on the nodes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ...config import TrainConfig, TrainerConfig
from ...serving.config import ServerConfig
from ...training.checkpoints import checkpoint_name
from ...trajectories import Trajectory, TrajectoryGroup
from ...types import TrainSFTConfig

if TYPE_CHECKING:
    from ...training.trainer import GRPOTrainer


def _threads(count: int) -> None:
    """Compute with `count` threads: Ray sets OMP_NUM_THREADS to an actor's CPUs or 1, torch and vLLM read it."""
    os.environ["OMP_NUM_THREADS"] = str(count)
    import torch

    torch.set_num_threads(count)


def read_files(directory: Path) -> dict[str, bytes]:
    """A checkpoint directory's files (it has no subdirectories), to send to another process."""
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def write_files(files: dict[str, bytes], directory: Path) -> Path:
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

        from ...serving.embedded import resolve_base_model  # on this node: each node converts or finds the model itself
        from ...serving.vllm_server import VLLMServer

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
        self._unseen_start = True
        """Its server started since the driver last asked for the endpoint (here, or by Ray rerunning this)."""

    def endpoint(self) -> tuple[str, str]:
        """Where its server is (its base URL without /v1) and the server's key (`autorl.serving.auth`), which
        only the driver gets (a restarted actor's server has a new one)."""
        self._unseen_start = False
        return self.server.base_url.removesuffix("/v1"), self.server.api_key

    def ensure_running(self) -> tuple[str, str, bool]:
        """Restart the server if it died or no longer answers its health check (same port and key; it starts
        with the base model); returns the endpoint and whether a server started since the driver last saw
        one (False where a request failed but the server is up: no start to count)."""
        started = self._unseen_start
        if not self.server.healthy():
            self.server.restart()
            self._step, self._adapter = 0, None
            started = True
        return (*self.endpoint(), started)

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
                    self.server.load_merged(write_files(files, Path(directory)))
        else:
            if files is not None:
                self.server.load_lora(name, write_files(files, self._adapters / name))
            if self._adapter is not None:
                self.server.unload_lora(self._adapter)
                shutil.rmtree(self._adapters / self._adapter, ignore_errors=True)
            self._adapter = name if files is not None else None
        self._step = step

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self._adapters, ignore_errors=True)


class TrainerActor:
    """One worker of a model's trainer on its Ray node: the `GRPOTrainer`, started from the checkpoint it is
    given (its files); each step returns the metrics and, from rank 0, the checkpoint's files for the driver
    to keep. Alone (`world_size` 1) it trains at once; as one rank of a data-parallel trainer
    (`autorl.training.data_parallel`) it trains once `join` has put every rank into one process group, at
    the `address` rank 0 gives."""

    def __init__(
        self,
        base_model: str,
        config: TrainerConfig,
        threads: int,
        latest: dict[str, bytes] | None,
        step: int,
        rank: int = 0,
        world_size: int = 1,
        max_seq_length: int = 2048,
    ):
        from ...serving.embedded import resolve_base_model
        from ...training.engines import prepare_engine

        _threads(threads)
        prepare_engine(config.engine)  # Unsloth, where it trains, before transformers and peft load
        from ...training.trainer import GRPOTrainer

        self._dir = Path(tempfile.mkdtemp(prefix="autorl-trainer-"))
        if latest is not None:
            write_files(latest, self._dir / checkpoint_name(step))
        self._model_dir = resolve_base_model(base_model)
        self._config = config
        self._rank = rank
        self._max_seq_length = max_seq_length
        self.trainer: GRPOTrainer | None = None
        if world_size == 1:
            self.trainer = GRPOTrainer(self._model_dir, self._dir, config, max_seq_length=max_seq_length)

    def address(self) -> str:
        """Where rank 0 takes the others' connections: this node's IP and a port free on it."""
        import socket

        import ray

        host = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"

    def join(self, address: str, world_size: int) -> None:
        """Load the policy as rank `rank` of `world_size`, in the process group at `address`; returns once every
        rank has joined (DDP then holds rank 0's LoRA on every rank)."""
        from ...training.data_parallel import DataParallel
        from ...training.trainer import GRPOTrainer

        parallel = DataParallel(self._rank, world_size, address)
        self.trainer = GRPOTrainer(
            self._model_dir, self._dir, self._config, parallel=parallel, max_seq_length=self._max_seq_length
        )

    def step(self, groups: list[TrajectoryGroup], config: TrainConfig, step: int) -> tuple[dict, dict[str, bytes]]:
        return self._saved(self._trainer().step(groups, config, step), step)

    def sft(self, trajectories: list[Trajectory], config: TrainSFTConfig, step: int) -> tuple[dict, dict[str, bytes]]:
        return self._saved(self._trainer().sft_step(trajectories, config), step)

    def _trainer(self) -> GRPOTrainer:
        if self.trainer is None:
            raise RuntimeError("a data-parallel trainer worker trains once it has joined its process group")
        return self.trainer

    def _saved(self, metrics: dict, step: int) -> tuple[dict, dict[str, bytes]]:
        """The step's metrics and its checkpoint's files, once saved (rank 0; the other ranks' replicas are
        the same, and they send no files)."""
        from ...training.trainer import release_freed_memory

        if self._rank:
            release_freed_memory()
            return metrics, {}
        path = self._trainer().save(step, metrics)
        release_freed_memory()
        files = read_files(path)
        for old in self._dir.iterdir():  # the trainer resumes from memory; only the newest is kept on disk
            if old != path:
                shutil.rmtree(old, ignore_errors=True)
        return metrics, files

    def stop(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
