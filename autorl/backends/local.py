"""`LocalBackend`: serves each model with a vLLM server on this machine and trains its LoRA in this process."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..config import TrainConfig, TrainerConfig
from ..errors import ServerDiedError
from ..serving.config import ServerConfig, check_lora_servable, cuda_available
from ..serving.embedded import resolve_base_model
from ..serving.ports import check_port
from ..serving.vllm_server import VLLMServer
from ..training.checkpoints import METRICS_FILE, checkpoint_name, missing_checkpoint
from ..training.engines import check_target_modules
from ..trajectories import Trajectory, TrajectoryGroup
from ..types import TrainSFTConfig
from .base import inference_name
from .model_backend import ModelBackend

if TYPE_CHECKING:
    from ..model import TrainableModel
    from ..training.trainer import GRPOTrainer

log = logging.getLogger("autorl")


class LocalServing:
    """One model's vLLM server on this machine, the checkpoints it holds, and its restarts."""

    def __init__(
        self, model: TrainableModel, run_dir: Path, server: VLLMServer, max_restarts: int, torch_thread: Executor
    ):
        self.model_name = model.name
        self.base_model = model.base_model
        self.run_dir = run_dir
        self.server = server
        self.max_restarts = max_restarts
        self.loaded: dict[str, int] = {}
        """LoRA names loaded into the server, and their steps (adapter serving). A name stays loaded while its
        checkpoint exists (`retire` unloads it when the checkpoint goes), not only while it is the newest: a
        rollout that took the model's name before a step may send its requests after the step."""
        self.resident = 0
        """The step whose weights the server holds (merged serving; 0: the base model)."""
        self.current = 0
        """The step served last (`serve`): the newest checkpoint, unless an older one was asked for since."""
        self.restarts = 0
        """Times the server died and was restarted."""
        self.torch_thread = torch_thread
        """Where merges run: the model's torch thread (`LocalPlacement.torch_thread`)."""
        self._restart_lock = asyncio.Lock()
        self._load_lock = asyncio.Lock()
        """One load or unload at a time: a second `serve` of a step being loaded waits for that load instead of
        sending its own (which vLLM refuses: "already been loaded"), and an unload never overtakes a load."""

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def api_key(self) -> str:
        return self.server.api_key

    def transport(self) -> None:
        return None

    async def serve(self, step: int) -> str:
        if not self.server.running:
            await self.recover()
        name = await self._load(step)
        self.current = step
        return name

    async def _load(self, step: int) -> str:
        path = None
        if step > 0:
            path = self.run_dir / "checkpoints" / checkpoint_name(step)
            if not (path / METRICS_FILE).is_file():
                raise missing_checkpoint(self.model_name, step, self.run_dir / "checkpoints")
        if self.server.merged:
            if self.resident != step:
                await asyncio.get_running_loop().run_in_executor(self.torch_thread, self.server.load_merged, path)
                self.resident = step
            return self.server.served_name
        if path is None:
            return self.base_model
        name = inference_name(self.model_name, step)
        async with self._load_lock:
            if name not in self.loaded:
                await asyncio.to_thread(self.server.load_lora, name, path)
                self.loaded[name] = step
        return name

    async def retire(self, step: int) -> None:
        """Unload checkpoint `step`'s LoRA (adapter serving), if loaded: its files are about to go."""
        name = inference_name(self.model_name, step)
        async with self._load_lock:
            if name in self.loaded:
                await asyncio.to_thread(self.server.unload_lora, name)
                del self.loaded[name]

    def served_steps(self) -> set[int]:
        return {self.current} - {0}

    async def recover(self) -> bool:
        """Restart the server if it died or no longer answers its health check (it is shutting down, or its
        engine died), serving what it served (merged: the resident checkpoint; adapter: every loaded LoRA) on
        the same port; returns whether the server runs now, i.e. whether a request that failed to reach it
        is worth sending again. The model's clients call this when a request cannot connect or is cut
        (`autorl.backends.transport`). Raises `ServerDiedError` when the server died more than
        `ServerConfig.max_restarts` times."""
        async with self._restart_lock:  # requests that failed together: the first restarts, the rest retry
            if await asyncio.to_thread(self.server.healthy):
                return True
            code = self.server.exit_code
            how = "running, but failing its health check" if code is None else f"exit code {code}"
            if self.restarts >= self.max_restarts:
                raise ServerDiedError(
                    f"the vLLM server of {self.model_name!r} died {self.restarts + 1} times (last: {how}); "
                    f"see {self.server.log_path}"
                )
            self.restarts += 1
            log.warning(
                "the vLLM server of %r died (%s); restarting it (%d of at most %d)",
                self.model_name, how, self.restarts, self.max_restarts,
            )  # fmt: skip
            resident, loaded = self.resident, dict(self.loaded)
            self.resident, self.loaded = 0, {}
            await asyncio.to_thread(self.server.restart)
            for step in sorted({resident, *loaded.values()} - {0}):
                await self._load(step)
            return True

    def close(self) -> None:
        self.server.stop()


class ThreadTrainer:
    """The `GRPOTrainer` of one model, built, stepped and saved on the model's torch thread.

    One thread, not asyncio's pool: glibc gives each thread its own malloc arena and keeps what a step frees
    there (gigabytes of activations on CPU); steps spread over asyncio's worker threads would each leave a
    step's worth in their own arena, where one thread holds one step's worth in all.
    """

    def __init__(
        self, model_dir: Path, checkpoints: Path, config: TrainerConfig, torch_thread: Executor, max_seq_length: int
    ):
        self._model_dir = model_dir
        self._checkpoints = checkpoints
        self._config = config
        self._max_seq_length = max_seq_length
        self._trainer = None
        self._thread = torch_thread

    async def step(self, groups: list[TrajectoryGroup], config: TrainConfig, step: int) -> dict:
        return await self._update(lambda trainer: trainer.step(groups, config, step), step)

    async def sft(self, trajectories: list[Trajectory], config: TrainSFTConfig, step: int) -> dict:
        return await self._update(lambda trainer: trainer.sft_step(trajectories, config), step)

    async def _update(self, update: Callable[[GRPOTrainer], dict], step: int) -> dict:
        """`update` of the trainer (built first, if it is not yet) and checkpoint `step`, on the torch thread."""
        on_thread = functools.partial(asyncio.get_running_loop().run_in_executor, self._thread)
        if self._trainer is None:
            from ..training.engines import prepare_engine

            prepare_engine(self._config.engine)  # Unsloth, where it trains, before transformers and peft
            from ..training.trainer import GRPOTrainer  # torch, transformers and peft load only to train

            self._trainer = await on_thread(
                functools.partial(GRPOTrainer, max_seq_length=self._max_seq_length),
                self._model_dir,
                self._checkpoints,
                self._config,
            )
        metrics = await on_thread(update, self._trainer)
        await on_thread(self._trainer.save, step, metrics)
        return metrics

    def close(self) -> None:
        self._trainer = None  # the thread is the placement's


class LocalPlacement:
    """Each model's vLLM server a child process of this one, its trainer a thread of it."""

    remote_server_starts = 0

    def __init__(self, server: ServerConfig):
        self.server_config = server
        self._torch_threads: dict[str, ThreadPoolExecutor] = {}

    def torch_thread(self, model: TrainableModel) -> ThreadPoolExecutor:
        """The one thread that runs `model`'s torch work in this process: its trainer's steps and, with merged
        serving, the merges of its checkpoints. Torch called from a second thread starts a second OpenMP
        thread team (with more OpenMP threads than cores, libgomp, by our reading, stops spinning between
        parallel regions and sleeps in the kernel), which slows the trainer's next step
        (`benchmarks/perf/perf_merge_thread.py` measures a step after a merge on either thread)."""
        if model.name not in self._torch_threads:
            self._torch_threads[model.name] = ThreadPoolExecutor(1, f"autorl-torch-{model.name}")
        return self._torch_threads[model.name]

    async def start_serving(self, model: TrainableModel, run_dir: Path) -> LocalServing:
        model_dir = resolve_base_model(model.base_model)
        config = self.server_config.with_overrides(model.server)
        merged = config.serves_merged()
        check_lora_servable(config, model.trainer.lora_rank, model.trainer.target_modules)
        served_name = model.name if merged else model.base_model
        label = f"the policy {model.name} ({model.base_model})"
        server = VLLMServer(model_dir, served_name, run_dir / "logs" / "vllm.log", config, label=label)
        try:
            await asyncio.to_thread(server.start)
        except asyncio.CancelledError:  # Ctrl-C during start-up: stopping ends the start thread's wait
            server.stop()
            raise
        return LocalServing(model, run_dir, server, config.max_restarts, self.torch_thread(model))

    def trainer(self, model: TrainableModel, run_dir: Path) -> ThreadTrainer:
        checkpoints = run_dir / "checkpoints"
        longest = self.server_config.with_overrides(model.server).max_model_len  # what the server can give it
        model_dir = resolve_base_model(model.base_model)
        return ThreadTrainer(model_dir, checkpoints, model.trainer, self.torch_thread(model), longest)

    def close(self) -> None:
        threads, self._torch_threads = list(self._torch_threads.values()), {}
        for thread in threads:
            thread.shutdown(wait=False)


class LocalBackend(ModelBackend):
    """Runs everything on this machine: one vLLM server per registered model, PEFT training in-process.

    path: the home of all runs (ART's `art_path`); a model's directory is `path/<project>/models/<name>/`
        (`autorl.utils.output_dirs`) and holds `checkpoints/NNNN/` (PEFT LoRA; `0000`: the base model),
        `history.jsonl`, `log_history.jsonl`, `trajectories/<split>/NNNN.parquet` and `logs/`.
    server: how the vLLM server is started (port, memory, context length, how LoRAs are served, ...).
    in_process: ART's keyword, accepted: the trainer runs in this process either way.
    layout: "art" (above) or "run" (`autorl run`'s: `path/<project>/<name>/`); see `ModelBackend`.

    How a trained LoRA reaches the server follows `ServerConfig.lora_serving`. Adapter serving (the
    default on CUDA): each checkpoint is a vLLM LoRA served as `<name>@NNNN`, the base model under its
    own name. Merged serving (the default on CPU, faster rollouts there: see `ServerConfig.lora_serving`):
    the server holds one checkpoint's weights at a time, served as `<name>`; `serve_checkpoint` swaps them in.
    """

    def __init__(
        self,
        path: str | os.PathLike = ".autorl",
        *,
        server: ServerConfig | None = None,
        in_process: bool = False,
        layout: Literal["art", "run"] = "art",
    ):
        self.server_config = server or ServerConfig()
        self.in_process = in_process
        """ART's choice of where its training service runs; here the trainer always runs in this process (on a
        thread of its own) and the vLLM server in a child process, whatever it says."""
        super().__init__(path, LocalPlacement(self.server_config), layout)

    def check_can_start(self, model: TrainableModel) -> None:
        super().check_can_start(model)
        check_target_modules(resolve_base_model(model.base_model), model.trainer.target_modules)
        check_port(self.server_config)

    def starts_embedded_apart(self) -> bool:
        return self.server_config.serves_merged()  # adapter serving keeps the base weights servable

    def shares_cpu_with_embedded(self) -> bool:
        return self.server_config.serves_merged() and not cuda_available()
