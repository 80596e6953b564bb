"""Merge a PEFT LoRA checkpoint into its base model's weights (W + scale * B @ A), as safetensors.

Serving merged weights lets vLLM run the plain base-model path instead of its LoRA kernels, which on
CPU gather per-token copies of the adapter, so merged rollouts are several times faster
(`benchmarks/perf/perf_grpo_step.py` measures both). A `LoraMerger` keeps the base model's tensors in memory,
so merging a checkpoint is one small matmul per adapted layer instead of re-reading the base file each time,
and writes one `model.safetensors` with the base model's tensor names, which vLLM reloads with its ordinary
checkpoint loader.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..atomic import atomic_file
from ..errors import AutoRLError

MERGED_FILE = "model.safetensors"
_ADAPTER_PREFIX = "base_model.model."


def lora_scale(adapter_config: dict, module: str) -> float:
    """The LoRA scaling factor of `module`: alpha / r (alpha / sqrt(r) with rsLoRA), per-module patterns applied."""
    rank = adapter_config["r"]
    alpha = adapter_config["lora_alpha"]
    for pattern, value in (adapter_config.get("rank_pattern") or {}).items():
        if re.fullmatch(rf"(.*\.)?({pattern})", module):  # PEFT's matching of pattern keys
            rank = value
    for pattern, value in (adapter_config.get("alpha_pattern") or {}).items():
        if re.fullmatch(rf"(.*\.)?({pattern})", module):
            alpha = value
    return alpha / math.sqrt(rank) if adapter_config.get("use_rslora") else alpha / rank


def read_adapter(adapter_dir: Path) -> tuple[dict, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """A PEFT LoRA checkpoint's config and its (A, B) weights by module name; refuses what does not merge."""
    config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    if config.get("peft_type", "LORA") != "LORA" or config.get("use_dora") or config.get("fan_in_fan_out"):
        raise AutoRLError(f"cannot merge {adapter_dir}: only plain LoRA adapters (no DoRA, no fan_in_fan_out) merge")
    parts: dict[str, dict[str, torch.Tensor]] = {}
    with safe_open(Path(adapter_dir) / "adapter_model.safetensors", "pt") as f:
        for key in f.keys():  # noqa: SIM118 (a safetensors file is not iterable)
            match = re.fullmatch(r"(.+)\.(lora_A|lora_B)\.weight", key.removeprefix(_ADAPTER_PREFIX))
            if match is None:
                raise AutoRLError(f"cannot merge {adapter_dir}: unexpected adapter tensor {key}")
            parts.setdefault(match[1], {})[match[2]] = f.get_tensor(key)
    return config, {module: (p["lora_A"], p["lora_B"]) for module, p in parts.items()}


class LoraMerger:
    """One base model's weights, held in memory, into which LoRA checkpoints are merged one at a time.

    dtype: the dtype of the merged tensors (default: as stored), e.g. the dtype a server runs in, so
        that it loads them as they are. Each merged weight is computed from the stored base weight in
        float32 and rounded to `dtype` once.
    """

    def __init__(self, base_dir: Path, dtype: torch.dtype | None = None):
        self.base_dir = Path(base_dir)
        """Where the base weights were read from."""
        files = sorted(self.base_dir.glob("*.safetensors"))
        if not files:
            raise AutoRLError(f"no safetensors weights in {base_dir}")
        self.base: dict[str, torch.Tensor] = {}
        """The base model's tensors by checkpoint name, as stored."""
        for file in files:
            for key, tensor in load_file(file).items():
                self.base[key] = tensor.clone()  # off the file's mmap
        self._out = {k: v.to(dtype) for k, v in self.base.items()} if dtype is not None else self.base
        """What `merged` starts from: the base tensors in the output dtype."""
        self.nbytes = sum(t.numel() * t.element_size() for t in self._out.values())
        """Size of the merged tensors (what `write` puts on disk, plus a small header)."""

    def base_weights(self) -> dict[str, torch.Tensor]:
        """The base tensors in the output dtype, no LoRA added (shared, not copied)."""
        return dict(self._out)

    def merged(self, adapter_dir: Path) -> dict[str, torch.Tensor]:
        """The base tensors with the LoRA deltas of `adapter_dir` added (untouched tensors are shared, not copied)."""
        config, lora = read_adapter(adapter_dir)
        merged = self.base_weights()
        for module, (a, b) in lora.items():
            key = f"{module}.weight"
            if key not in merged:
                raise AutoRLError(f"cannot merge {adapter_dir}: no base weight {key}")
            weight = self.base[key]
            delta = torch.addmm(weight.float(), b.float(), a.float(), alpha=lora_scale(config, module))
            merged[key] = delta.to(merged[key].dtype)
        return merged

    def write(self, adapter_dir: Path, out_dir: Path) -> Path:
        """Write the merged weights to `out_dir/model.safetensors` (atomically replaced); returns `out_dir`."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        tensors = self.merged(adapter_dir)
        contiguous = {k: v.contiguous() for k, v in tensors.items()}
        atomic_file(out_dir / MERGED_FILE, lambda tmp: save_file(contiguous, str(tmp), metadata={"format": "pt"}))
        return out_dir


def merged_state_dict(base_dir: Path, adapter_dir: Path, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The base model's tensors with the LoRA deltas of `adapter_dir` added, in `dtype` (default: as stored)."""
    return LoraMerger(base_dir, dtype).merged(adapter_dir)


def write_merged(base_dir: Path, adapter_dir: Path, out_dir: Path, dtype: torch.dtype | None = None) -> Path:
    """Write `out_dir/model.safetensors`: the base model with the LoRA of `adapter_dir` merged in."""
    return LoraMerger(base_dir, dtype).write(adapter_dir, out_dir)
