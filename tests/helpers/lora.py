"""Real PEFT LoRA checkpoints with random weights, and finished runs whose checkpoints are such LoRAs."""

from __future__ import annotations

from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from autorl.serving.config import ServerConfig
from tests.helpers.benchmark_runs import make_run

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_lora(base_dir: Path, out_dir: Path, seed: int = 1, scale: float = 1.0, **lora_kwargs) -> Path:
    """A LoRA whose A and B are both random (PEFT's default B = 0 would make the merge a no-op), B times `scale`
    (below 1: a real model stays near its base and still speaks)."""
    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base_dir),
        LoraConfig(target_modules=TARGETS, init_lora_weights=False, task_type="CAUSAL_LM", **lora_kwargs),
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.mul_(scale)
    model.save_pretrained(out_dir)
    return out_dir


def lora_run(
    home: Path,
    model: str,
    base_dir: Path,
    rewards: tuple[float, ...] = (0.6, 0.4),
    scale: float = 1.0,
    server: ServerConfig | None = None,
) -> Path:
    """A finished run `r` of `model` (`base_dir`: its weights) as the pipeline records it
    (`benchmark_runs.make_run`, `server` its server settings), each checkpoint a random LoRA of its own; returns
    its checkpoints directory."""
    make_run(home, rewards=rewards, model=model, server=server)
    checkpoints = next((home / "artifacts").glob("train/*/checkpoints"))
    for step in range(1, len(rewards) + 1):
        random_lora(base_dir, checkpoints / f"{step:04d}", seed=step, scale=scale, r=4, lora_alpha=8)
    return checkpoints
