"""Configuration of training: per `model.train()` call (TrainConfig) and per model (TrainerConfig)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class TrainConfig(BaseModel):
    """Settings of one GRPO update (`model.train(groups, config=TrainConfig(...))`)."""

    learning_rate: float = Field(2e-5, gt=0)
    """AdamW learning rate of the LoRA weights."""
    epsilon: float = Field(0.2, ge=0)
    """Lower clip range of the importance ratio: ratios below 1 - epsilon stop contributing."""
    epsilon_high: float | None = Field(0.28, ge=0)
    """Upper clip range (ratio above 1 + epsilon_high is clipped); None uses `epsilon`."""
    scale_rewards: bool = True
    """Divide each group's advantages by its reward standard deviation."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradients are clipped to this global norm."""
    micro_batch_size: int = Field(8, ge=1)
    """Sequences per forward/backward pass; gradients accumulate over one optimizer step. 8 holds a typical
    group, whose shared prompt then runs once (`TrainerConfig.share_prompt_prefix`): 1.15-1.3x faster
    updates than 4 on CPU (benchmarks/perf_grpo_step.py); lower it when activations do not fit."""


class TrainerConfig(BaseModel):
    """How a model's LoRA is built and trained; fixed for the life of a model."""

    lora_rank: int = Field(8, ge=1)
    """LoRA rank r (the inference server's max_lora_rank must be at least this)."""
    lora_alpha: int = Field(16, ge=1)
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the LoRA input during training."""
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    """Linear layers that get a LoRA."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Training dtype of the frozen base weights. auto: bfloat16 where the hardware runs it fast (a CUDA GPU
    with bf16 support, or a CPU with avx512_bf16 or amx_bf16: 1.3x faster updates than float32 on such a
    CPU, benchmarks/perf_grpo_step.py), else float32. The LoRA weights and their optimizer state stay
    float32 either way."""
    seed: int = 0
    """Seed of the LoRA initialisation."""
    share_prompt_prefix: bool = True
    """Run the context tokens that a micro-batch's sequences share (a group's prompt) through the model
    once, and continue every sequence from that KV cache, instead of once per sequence. Same loss and
    gradients up to float rounding; a group's sequences are then batched together. With LoRA dropout,
    the shared tokens share one dropout mask."""
