"""How much memory a vLLM server on CPU gets: its KV cache in bytes (`kv_cache_bytes`), from the model's shape
and the memory available (`memory_available_for_kv`), never as a fraction of memory (vLLM's CPU worker would
take a fraction of one NUMA node's memory minus its own RSS, which can come out negative where the node
reports less than the machine has)."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from ..errors import AutoRLError

log = logging.getLogger(__name__)

KV_BLOCK_TOKENS = 128
"""Tokens per KV cache block of vLLM's CPU attention (its default block size there)."""
KV_TOKENS_PER_SEQUENCE = 512
"""KV cache tokens counted for each of `max_num_seqs` sequences in flight: a rollout's prompt and answer (a
default run's are a few hundred tokens; a judge's group prompt is longer, and fewer run at once). A sequence
longer than this takes blocks the others do not use; when none are left vLLM preempts a sequence and later
recomputes it, so a run of long sequences is slower, never wrong. A cache sized for `max_num_seqs` sequences of
`max_model_len` tokens is four times larger at the defaults, and zeroing it is seconds of every start on CPU."""
MEMORY_MARGIN_BYTES = 3 * 2**30
"""Memory kept free beside the weights and the KV cache: vLLM's own runtime (torch, compiled code,
activations) and whatever else the run allocates meanwhile."""
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def kv_bytes_per_token(model_dir: Path, dtype: str = "auto") -> int:
    """KV cache bytes one token takes: layers x KV heads x head size x 2 (K and V) x bytes of the dtype,
    from the model's config.json. dtype "auto" is 2 bytes: vLLM serves float32 checkpoints in bfloat16
    (float16 where the platform lacks it) and 16-bit ones as they are; an unknown dtype counts 4."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AutoRLError(
            f"cannot size the KV cache: {path} is unreadable ({exc}); set ServerConfig.kv_cache_bytes"
        ) from None
    config = config.get("text_config", config)
    try:
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        layers = config["num_hidden_layers"]
    except KeyError as exc:
        raise AutoRLError(f"cannot size the KV cache: {path} has no {exc}; set ServerConfig.kv_cache_bytes") from None
    kv_heads = config.get("num_key_value_heads") or heads
    dtype_bytes = 2 if dtype == "auto" else _DTYPE_BYTES.get(dtype.removeprefix("torch."), 4)
    return layers * kv_heads * head_dim * 2 * dtype_bytes


def kv_cache_bytes(
    model_dir: Path, max_num_seqs: int, max_model_len: int, available_bytes: int, dtype: str = "auto"
) -> int:
    """The KV cache, in bytes, for `max_num_seqs` sequences of `KV_TOKENS_PER_SEQUENCE` tokens (`max_model_len`
    where it is shorter), and at least one sequence of `max_model_len`, capped at `available_bytes` (memory free
    for it once the weights are loaded).

    Lengths are counted in whole blocks of `KV_BLOCK_TOKENS`; the sequence of `max_model_len` gets one block
    more (vLLM keeps one block back, and a sequence rarely ends on a block boundary). Below that one sequence
    vLLM refuses to start, so it not fitting in `available_bytes` is an AutoRLError.
    """
    per_token = kv_bytes_per_token(model_dir, dtype)
    per_sequence = (math.ceil(max_model_len / KV_BLOCK_TOKENS) + 1) * KV_BLOCK_TOKENS * per_token
    in_flight = math.ceil(min(max_model_len, KV_TOKENS_PER_SEQUENCE) / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS * per_token
    wanted = max(max_num_seqs * in_flight, per_sequence)
    if per_sequence > available_bytes:
        raise AutoRLError(
            f"the KV cache needs at least {per_sequence / 2**30:.2f} GiB (one sequence of max_model_len "
            f"{max_model_len} tokens) but only {max(available_bytes, 0) / 2**30:.2f} GiB is available for it; "
            f"lower max_model_len or free memory"
        )
    if wanted > available_bytes:
        log.warning(
            "KV cache capped at %.2f GiB, the memory available (%d sequences in flight want %.2f GiB); "
            "lower max_num_seqs to stop this",
            available_bytes / 2**30,
            max_num_seqs,
            wanted / 2**30,
        )
        return available_bytes
    return wanted


def _meminfo(path: str) -> dict[str, int]:
    """A meminfo file (/proc/meminfo, or a NUMA node's, whose lines start "Node N") as bytes by key."""
    values = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "Node":
            parts = parts[2:]
        if len(parts) >= 2 and parts[1].isdigit():
            values[parts[0].rstrip(":")] = int(parts[1]) * (1024 if parts[2:] == ["kB"] else 1)
    return values


def memory_available_for_kv(model_dir: Path) -> int:
    """Bytes the KV cache may take: memory available, less the weights' size on disk and
    `MEMORY_MARGIN_BYTES`. Memory available is the lesser of /proc/meminfo's MemAvailable and what vLLM's
    CPU worker counts free on its NUMA node (the node of this process's first CPU; free + file cache +
    reclaimable slab), since vLLM refuses a KV cache larger than the latter."""
    available = _meminfo("/proc/meminfo")["MemAvailable"]
    cpu = min(os.sched_getaffinity(0))
    node = next(Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node[0-9]*"), None)
    if node is not None:
        try:
            info = _meminfo(f"/sys/devices/system/node/{node.name}/meminfo")
            free = info["MemFree"] + info["Active(file)"] + info["Inactive(file)"] + info["SReclaimable"]
            available = min(available, free)
        except (OSError, KeyError):
            pass
    weights = sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin") for f in Path(model_dir).glob(pattern))
    return available - weights - MEMORY_MARGIN_BYTES
