"""What this machine's CPU does natively that autorl's defaults depend on: bf16 matrix multiplies.

A CPU with `avx512_bf16` or `amx_bf16` runs bf16 matmuls in hardware, faster than fp32; one without (AVX2-only
machines, most laptops) runs them in software, several times slower than fp32. The trainer's and the vLLM
server's `dtype="auto"` follow this (`benchmarks/perf/perf_server_dtype.py` measures the server's).
"""

from __future__ import annotations

from pathlib import Path

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags under which bf16 matmuls run natively."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux's /proc/cpuinfo); none known elsewhere."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return set()
    return {flag for line in lines if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware."""
    return bool(cpu_flags() & set(BF16_CPU_FLAGS))
