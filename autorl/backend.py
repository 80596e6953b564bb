"""`LocalBackend`: serves a model with a local vLLM server and trains its LoRA in this process."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .atomic import atomic_text
from .checkpoints import METRICS_FILE, checkpoint_name, latest_checkpoint
from .config import TrainConfig
from .embedded import resolve_base_model
from .errors import AutoRLError, ServerDiedError
from .trajectories import TrajectoryGroup
from .vllm_server import ServerConfig, VLLMServer, install_exit_hooks

if TYPE_CHECKING:
    from .model import TrainableModel

log = logging.getLogger("autorl")
HISTORY_FILE = "history.jsonl"
LOCAL_API_KEY = "autorl-local"


def inference_name(model_name: str, step: int) -> str:
    """The name vLLM serves the LoRA of `step` under."""
    return f"{model_name}@{checkpoint_name(step)}"


class _ModelState:
    """What the backend holds for one registered model."""

    def __init__(self, run_dir: Path, model_dir: Path, server: VLLMServer):
        self.run_dir = run_dir
        self.model_dir = model_dir
        self.server = server
        self.trainer = None
        """The GRPOTrainer, created at the first training step."""
        self.train_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autorl-train")
        """The one thread the trainer is built, stepped and saved on. glibc gives each thread its own malloc
        arena and keeps what a step frees there (gigabytes of activations on CPU): steps spread over
        asyncio's worker threads grew a run to 22 GB, where one thread holds one step's worth."""
        self.lock = asyncio.Lock()
        self.loaded: dict[str, int] = {}
        """LoRA names loaded into the server, and their steps (adapter serving)."""
        self.resident = 0
        """The step whose weights the server holds (merged serving; 0: the base model)."""
        self.restarts = 0
        """Times the server died and was restarted."""
        self.restart_lock = asyncio.Lock()


class LocalBackend:
    """Runs everything on this machine: one vLLM server per registered model, PEFT training in-process.

    path: the home of all runs; a model's run directory is `path/<project>/<name>/` and holds
        `checkpoints/NNNN/` (PEFT LoRA), `history.jsonl` and `logs/`.
    server: how the vLLM server is started (port, memory, context length, how LoRAs are served, ...).

    How a trained LoRA reaches the server follows `ServerConfig.lora_serving`. Adapter serving (the
    default on CUDA): each checkpoint is a vLLM LoRA served as `<name>@NNNN`, the base model under its
    own name. Merged serving (the default on CPU, 3x the rollout tokens/s there): the server holds one
    checkpoint's weights at a time, served as `<name>`; `serve_checkpoint` swaps them in.
    """

    def __init__(self, path: str | os.PathLike = ".autorl", *, server: ServerConfig | None = None):
        install_exit_hooks()  # here, in the thread that makes the backend: SIGTERM is the main thread's to take
        self.path = Path(path)
        self.server_config = server or ServerConfig()
        self._models: dict[str, _ModelState] = {}
        self.remote_server_starts = 0
        """vLLM servers this backend has started in other processes (a `ClusterBackend`'s replicas); this
        process's own starts are counted in `VLLMServer.starts`."""

    def run_dir(self, model: TrainableModel) -> Path:
        return self.path / model.project / model.name

    async def register(self, model: TrainableModel) -> None:
        """Start the model's inference server, serving its newest checkpoint if it has one."""
        if model.name in self._models:
            return
        run_dir = self.run_dir(model)
        ensure_writable(run_dir)
        model_dir = resolve_base_model(model.base_model)
        merged = self.server_config.serves_merged()
        if not merged and self.server_config.max_lora_rank < model.trainer.lora_rank:
            raise AutoRLError(
                f"LoRA rank {model.trainer.lora_rank} exceeds the server's max_lora_rank "
                f"{self.server_config.max_lora_rank}; raise ServerConfig.max_lora_rank"
            )
        served_name = model.name if merged else model.base_model
        server = VLLMServer(model_dir, served_name, run_dir / "logs" / "vllm.log", self.server_config)
        try:
            await asyncio.to_thread(server.start)
        except asyncio.CancelledError:  # Ctrl-C during start-up: stopping ends the start thread's wait
            server.stop()
            raise
        state = _ModelState(run_dir, model_dir, server)
        self._models[model.name] = state
        reconcile_history(run_dir)
        model.inference_base_url = server.base_url
        model.inference_api_key = LOCAL_API_KEY
        model._gate.recover = lambda: self.recover(model)
        model.inference_model_name = served_name
        latest = latest_checkpoint(run_dir / "checkpoints")
        if latest is not None:
            model.inference_model_name = await self.serve_checkpoint(model, latest[0])

    async def get_step(self, model: TrainableModel) -> int:
        latest = latest_checkpoint(self.run_dir(model) / "checkpoints")
        return latest[0] if latest else 0

    async def train(self, model: TrainableModel, groups: list[TrajectoryGroup], config: TrainConfig) -> dict:
        """One GRPO step: blocks the model's inference, updates the LoRA, checkpoints, serves it."""
        state = self._state(model)
        async with state.lock:
            model._gate.close()
            try:
                on_train_thread = functools.partial(asyncio.get_running_loop().run_in_executor, state.train_thread)
                if state.trainer is None:
                    from .trainer import GRPOTrainer  # torch, transformers and peft load only to train

                    state.trainer = await on_train_thread(
                        GRPOTrainer, state.model_dir, state.run_dir / "checkpoints", model.trainer
                    )
                step = await self.get_step(model) + 1
                metrics = await on_train_thread(state.trainer.step, groups, config)
                warn_untrained(step, groups, metrics)
                await on_train_thread(state.trainer.save, step, metrics)
                append_history(state.run_dir, {"step": step, **metrics})
                previous = model.inference_model_name
                model.inference_model_name = await self.serve_checkpoint(model, step)
                if previous in state.loaded:  # only the newest LoRA stays resident
                    await asyncio.to_thread(state.server.unload_lora, previous)
                    del state.loaded[previous]
            finally:
                model._gate.open()
        return {"step": step, **metrics}

    async def serve_checkpoint(self, model: TrainableModel, step: int) -> str:
        """The name under which the server serves checkpoint `step` (0: the base model), loading it if needed.

        With merged serving the server holds one checkpoint at a time: serving another step swaps the
        weights for every request after the swap (requests in flight finish on the old ones), so answer
        with one checkpoint after the other.
        """
        state = self._state(model)
        if not state.server.running:
            await self.recover(model)
        return await self._load_checkpoint(model, state, step)

    async def _load_checkpoint(self, model: TrainableModel, state: _ModelState, step: int) -> str:
        path = None
        if step > 0:
            path = state.run_dir / "checkpoints" / checkpoint_name(step)
            if not (path / METRICS_FILE).is_file():
                raise AutoRLError(f"model {model.name!r} has no checkpoint {checkpoint_name(step)}")
        if state.server.merged:
            if state.resident != step:
                await asyncio.to_thread(state.server.load_merged, path)
                state.resident = step
            return state.server.served_name
        if path is None:
            return model.base_model
        name = inference_name(model.name, step)
        if name not in state.loaded:
            await asyncio.to_thread(state.server.load_lora, name, path)
            state.loaded[name] = step
        return name

    async def recover(self, model: TrainableModel) -> bool:
        """Restart the model's server if it died or no longer answers its health check (it is shutting down,
        or its engine died), serving what it served (merged: the resident checkpoint;
        adapter: every loaded LoRA) on the same port; returns whether the server runs now, i.e. whether a
        request that failed to reach it is worth sending again. The model's clients call this when a
        request cannot connect or is cut (`autorl.model`). Raises `ServerDiedError` when the server died
        more than `ServerConfig.max_restarts` times."""
        state = self._models.get(model.name)
        if state is None:
            return False
        async with state.restart_lock:  # requests that failed together: the first restarts, the rest retry
            if await asyncio.to_thread(state.server.healthy):
                return True
            code = state.server.exit_code
            how = "running, but failing its health check" if code is None else f"exit code {code}"
            if state.restarts >= self.server_config.max_restarts:
                raise ServerDiedError(
                    f"the vLLM server of {model.name!r} died {state.restarts + 1} times (last: {how}); "
                    f"see {state.server.log_path}"
                )
            state.restarts += 1
            log.warning(
                "the vLLM server of %r died (%s); restarting it (%d of at most %d)",
                model.name, how, state.restarts, self.server_config.max_restarts,
            )  # fmt: skip
            resident, loaded = state.resident, dict(state.loaded)
            state.resident, state.loaded = 0, {}
            await asyncio.to_thread(state.server.restart)
            for step in sorted({resident, *loaded.values()} - {0}):
                await self._load_checkpoint(model, state, step)
            return True

    def _state(self, model: TrainableModel) -> _ModelState:
        if model.name not in self._models:
            raise AutoRLError(f"model {model.name!r} is not registered; call `await model.register(backend)` first")
        return self._models[model.name]

    def close(self) -> None:
        """Stop every inference server this backend started."""
        for state in self._models.values():
            state.server.stop()
            state.train_thread.shutdown(wait=False)
        self._models.clear()

    async def __aenter__(self) -> LocalBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def ensure_writable(run_dir: Path) -> None:
    """Create `run_dir` and prove it takes files; one clear error line if it does not."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise AutoRLError(f"run directory {run_dir} is not writable ({exc.strerror}); choose another --home") from None


def warn_untrained(step: int, groups: list[TrajectoryGroup], metrics: dict) -> None:
    """Log why step `step` left the LoRA unchanged, if it did."""
    if not groups:
        log.warning("step %d: no trajectory groups to train on; the LoRA is unchanged", step)
    elif metrics["groups_trained"] == 0:
        log.warning(
            "step %d: no training signal (%d of %d groups had tied rewards); the LoRA is unchanged",
            step,
            metrics["groups_skipped_tied"],
            metrics["groups"],
        )


def append_history(run_dir: Path, record: dict) -> None:
    with open(run_dir / HISTORY_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_history(run_dir: Path) -> list[dict]:
    """The per-step records of a run, in step order (a torn last line from a crash is ignored)."""
    path = run_dir / HISTORY_FILE
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def reconcile_history(run_dir: Path) -> None:
    """Make history.jsonl hold exactly one record per complete checkpoint, in order.

    A crash between a checkpoint's rename and its history line (or mid-line) leaves them out of step;
    each checkpoint carries its own metrics, so the history is rebuilt from them.
    """
    checkpoints = run_dir / "checkpoints"
    latest = latest_checkpoint(checkpoints)
    steps = [r.get("step") for r in read_history(run_dir)]
    if latest is None or steps == list(range(1, latest[0] + 1)):
        return
    records = [
        json.loads((checkpoints / checkpoint_name(s) / METRICS_FILE).read_text())
        for s in range(1, latest[0] + 1)
        if (checkpoints / checkpoint_name(s) / METRICS_FILE).is_file()
    ]
    atomic_text(run_dir / HISTORY_FILE, "".join(json.dumps(r) + "\n" for r in records))
