"""How a vLLM server is started (`ServerConfig`): importable without the server's process code, so the
layers that only read these settings (the pipeline's flags, the judge's context size) stay light."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CPU_MAX_NUM_SEQS = 32
"""`ServerConfig.max_num_seqs` on CPU when unset: above the largest batch of a default run (about 20 answers:
~10 validation inputs of the bundled tasks x `eval_samples` 2; a training step's rollouts, `group_size` 8 x
`groups_per_step` 2, are all in flight at once)."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def cuda_available() -> bool:
    import torch  # only when a server starts: `import autorl` stays light

    return torch.cuda.is_available()


EAGER_ENV = "AUTORL_ENFORCE_EAGER"
"""The environment variable that makes `ServerConfig.enforce_eager` default to true ("1")."""

CUDA_GPU_MEMORY_UTILIZATION = 0.5
"""vLLM's share of a CUDA GPU's memory when `gpu_memory_utilization` is unset, the embedded judge's server's
included where it runs beside the policy's (`autorl.serving.gpu.gpu_shares`): the trainer gets the rest."""


class ServerConfig(BaseModel):
    """How the local vLLM server is started."""

    model_config = ConfigDict(use_attribute_docstrings=True, allow_inf_nan=False)  # field docstrings are CLI help

    host: str = "127.0.0.1"
    """Interface to bind; loopback by default so the server is never exposed."""
    port: int | None = Field(None, ge=1, le=65535)
    """TCP port (1-65535); None picks a free one. A port in use is an error, never silently replaced."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    """CUDA only: fraction of GPU memory vLLM may use (weights, activations, KV cache); None: 0.5
    (`CUDA_GPU_MEMORY_UTILIZATION`) less the embedded judge's share where the policy is another model (a few
    hundredths, sized from the embedded model: `autorl.serving.gpu.gpu_shares`), leaving the rest to the trainer
    on the same GPU (vLLM's own default, 0.9, leaves the trainer too little); the start line says the split.
    Refused on CPU, where vLLM takes it as a fraction of one NUMA node's memory minus its own RSS (negative
    on a machine whose node reports less than it has): size the KV cache with `kv_cache_bytes` there."""
    kv_cache_bytes: int | None = Field(None, gt=0)
    """KV cache size in bytes (`--kv-cache-memory-bytes`). None: on CPU, sized for `max_num_seqs` sequences
    of a rollout's length (`autorl.serving.memory.KV_TOKENS_PER_SEQUENCE`), at least one of `max_model_len`, and
    capped by the memory available (see `autorl.serving.memory.kv_cache_bytes`; 0.35 GiB for SmolLM2-135M at the
    defaults in bfloat16, 0.70 GiB in float32); on CUDA, what `gpu_memory_utilization` leaves."""
    max_num_seqs: int | None = Field(None, ge=1)
    """Sequences vLLM runs at once (`--max-num-seqs`); more requests wait in its queue. On CPU the KV cache
    is sized for this many rollouts. None: 32 on CPU (`CPU_MAX_NUM_SEQS`, above a default run's largest batch),
    vLLM's default on CUDA."""
    max_model_len: int = 2048
    """Longest prompt + completion, in tokens."""
    max_lora_rank: int = 8
    """Largest LoRA rank the server accepts; must be at least the trained LoRA's rank."""
    max_loras: int = 2
    """LoRAs vLLM runs in one batch and keeps in memory (`--max-loras`): 2 covers the newest checkpoint and the
    one before it, which rollouts that named it before a step still ask for. Every checkpoint served stays
    loaded under its name until it is deleted; a request for one beyond these waits, and vLLM reads it again
    from its checkpoint."""
    dtype: str = Field("auto", pattern=r"^(auto|half|float16|bfloat16|float|float32)$")
    """Weights dtype for inference (auto, bfloat16, float32, ...). auto: the model's own, except float32 on a CPU
    without native bf16 matmuls (`autorl.cpu.native_bf16`), where bf16 runs in software (`resolved_dtype`)."""
    startup_timeout_s: float = 600.0
    """How long to wait for the server's health check before giving up."""
    max_restarts: int = Field(3, ge=0)
    """Times a `LocalBackend` restarts a model's server that died (on the same port, serving what it
    served); one more death ends the run with `ServerDiedError`."""
    tool_call_parser: str | None = Field("hermes", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """vLLM's parser of tool calls in the model's output (`--enable-auto-tool-choice --tool-call-parser`),
    which the OpenAI `tools` API needs. "hermes" reads the `<tool_call>` JSON that the embedded model's
    template asks for (and Qwen2.5 / Hermes models write); set the one your model's template uses, or
    None for no tool calling."""
    enforce_eager: bool | None = Field(default_factory=lambda: True if os.environ.get(EAGER_ENV, "") == "1" else None)
    """Run the model without torch.compile (`--enforce-eager`). On CPU a server then starts sooner and decodes
    somewhat slower (`benchmarks/perf/perf_server_start.py --set compile` measures both; its figures:
    docs/results.md): the better trade for short runs, and for a test suite that starts many servers. None
    (the default): compiled, except the policy of an `autorl run` on CPU, which starts eager when the run is too
    short for the compile to pay (`pipelines.policy.policy_server`); true when the environment sets
    AUTORL_ENFORCE_EAGER=1 (which reaches every server a run starts). The embedded judge's and generator's own
    server starts eager unless given a config (`autorl.serving.embedded.embedded_endpoint`)."""
    extra_args: list[str] = Field(default_factory=list)
    """More `vllm serve` flags, passed through as is."""
    lora_serving: Literal["auto", "adapter", "merged"] = "auto"
    """How a trained LoRA is served. "adapter": vLLM's LoRA support (`--enable-lora`); each checkpoint is
    loaded as an adapter and requested by its own name, several at once. "merged": `load_merged` adds
    the checkpoint's LoRA to the base weights (W + scale * B @ A) and reloads them into the running
    server in place, so requests take vLLM's plain model path, which on CPU is several times faster than
    LoRA requests, for the cost of a checkpoint write, merge and reload per step
    (`benchmarks/perf/perf_grpo_step.py` measures both; its figures: docs/results.md). The
    server then holds one checkpoint at a time, under one served name. It needs vLLM's development
    endpoints (VLLM_SERVER_DEV_MODE), so it is refused on a host other than loopback. "auto": merged on
    a machine without CUDA when the host is loopback, else adapter (vLLM's CUDA LoRA kernels cost little)."""
    merged_reload: Literal["memory", "files"] = "memory"
    """How merged serving gets a checkpoint into the server. "memory": the server's worker keeps the base
    weights, reads the LoRA checkpoint (megabytes), merges it and reloads the result in place from memory
    (`autorl/serving/worker_merge.py`, a vLLM worker extension reached through `/collective_rpc`). "files": the
    merged weights are written to a file (the whole model, in /dev/shm where it fits) that vLLM reads back; also
    what "memory" falls back to, with a warning, when the server cannot do the former.
    (`benchmarks/perf/perf_merged_reload.py` measures both.)"""
    cpu_in_process: bool = True
    """On CPU, run the model inside vLLM's engine process (`--distributed-executor-backend uni` with
    VLLM_ENABLE_V1_MULTIPROCESSING=0) instead of vLLM's CPU default, a separate worker process bound to
    all cores but one while the engine process busy-waits for it on the last core. In-process, the
    model's threads use every core, which was faster on 2 cores with the same greedy outputs (a measurement
    whose result was not kept; no benchmark compares the two executors now). No effect on a CUDA machine, or
    when `extra_args` choose an executor."""

    cpu_fork: bool = True
    """On CPU, fork vLLM's engine process from the server process instead of spawning it (vLLM's CPU default),
    so it starts with vLLM imported rather than importing it again (`autorl.serving.vllm_entry`; the server
    process then starts with the libraries vLLM preloads for its engine). No effect on a CUDA machine."""

    def with_overrides(self, overrides: dict[str, Any]) -> ServerConfig:
        """This config with `overrides` (fields, e.g. a model's own `TrainableModel.server`) in place of its values."""
        return type(self).model_validate({**self.model_dump(), **overrides}) if overrides else self

    def resolved_dtype(self) -> str:
        """`dtype`, with auto resolved to float32 on a CPU machine whose CPU lacks native bf16 matmuls; else as given
        (vLLM resolves auto: the model's dtype)."""
        from autorl.cpu import native_bf16

        if self.dtype == "auto" and not cuda_available() and not native_bf16():
            return "float32"
        return self.dtype

    def resolved_max_num_seqs(self) -> int | None:
        """`max_num_seqs`, with None resolved: `CPU_MAX_NUM_SEQS` on CPU, None (vLLM's default) on CUDA."""
        if self.max_num_seqs is None and not cuda_available():
            return CPU_MAX_NUM_SEQS
        return self.max_num_seqs

    def serves_merged(self) -> bool:
        """Whether LoRAs are served merged into the weights (`lora_serving`, with "auto" resolved here)."""
        if self.lora_serving == "auto":
            return self.host in LOOPBACK_HOSTS and not cuda_available()
        return self.lora_serving == "merged"


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The `--max-lora-rank` values vLLM accepts (its `MaxLoRARanks`); any other refuses the server's start."""
NOT_ADAPTER_MODULES = ("lm_head", "embed_tokens")
"""Modules a LoRA adapter served by vLLM cannot target: Unsloth saves them whole (`modules_to_save`), and vLLM's
LoRA loader refuses an adapter with them."""


def check_lora_servable(config: ServerConfig, lora_rank: int, target_modules: list[str]) -> None:
    """One `AutoRLError` line, before any server starts, when a LoRA of `lora_rank` on `target_modules` cannot be
    served as an adapter by a server of `config` (merged serving takes any LoRA): `max_lora_rank` must be one
    of `VLLM_LORA_RANKS` and at least the LoRA's rank, and no target may be one of `NOT_ADAPTER_MODULES`."""
    from ..errors import AutoRLError

    if config.serves_merged():
        return
    if config.max_lora_rank not in VLLM_LORA_RANKS:
        raise AutoRLError(
            f"max_lora_rank {config.max_lora_rank} is not one vLLM accepts ({', '.join(map(str, VLLM_LORA_RANKS))})"
        )
    if config.max_lora_rank < lora_rank:
        raise AutoRLError(
            f"LoRA rank {lora_rank} exceeds the server's max_lora_rank {config.max_lora_rank}; raise "
            "ServerConfig.max_lora_rank"
        )
    if bad := [m for m in target_modules if m.rpartition(".")[2] in NOT_ADAPTER_MODULES]:
        raise AutoRLError(
            f"target module(s) {', '.join(bad)} cannot be served as a vLLM LoRA adapter (it refuses whole saved "
            "modules); drop them from target_modules"
        )
