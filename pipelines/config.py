"""The configuration of a pipeline run; `autorl run` flags map onto these fields one to one."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from autorl.config import TrainConfig
from autorl.embedded import DEFAULT_BASE_MODEL
from autorl.rollout import RolloutConfig
from autorl.vllm_server import ServerConfig

STAGES = ("inputs", "system_prompt", "baseline", "train", "evaluate", "report")


class RunConfig(BaseModel):
    """Everything a run needs besides the task."""

    model_config = ConfigDict(extra="forbid")

    model: str = DEFAULT_BASE_MODEL
    """Base model of the policy: `embedded:<name>` or a local Hugging Face directory."""
    judge: str = "embedded"
    """Judge: a model for RULER (`embedded`, a LiteLLM string, `name@http://host:port/v1`) or `module:attribute`."""
    generator: str = "embedded"
    """Model that writes the inputs and the system prompt (same forms as a judge model)."""
    steps: int = Field(10, ge=1)
    """Training steps of the run (a resumed run trains until this many exist)."""
    group_size: int = Field(4, ge=2)
    """Rollouts per input; GRPO compares them, so at least 2."""
    groups_per_step: int = Field(2, ge=1)
    """Inputs (groups) per training step."""
    num_inputs: int | None = Field(None, ge=2)
    """Inputs to generate, train and validation together; None uses the task's `num_inputs`."""
    eval_samples: int = Field(2, ge=2)
    """Answers per validation input and variant in the baseline and evaluation stages (RULER compares, so at least 2)."""
    learning_rate: float = Field(TrainConfig().learning_rate, gt=0)
    """AdamW learning rate of the LoRA."""
    seed: int = 0
    """Seed of input generation and of the train/validation split."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Policy sampling settings."""
    home: Path = Path(".autorl")
    """Where runs (`runs/<name>`) and the artifact cache (`artifacts/`) live."""
    name: str | None = None
    """Run name; None derives one from the task text and the model."""
    wandb: bool = True
    """Log to Weights & Biases (offline unless WANDB_MODE says otherwise)."""
    force: list[str] = Field(default_factory=list)
    """Stages to recompute even if cached (each also recomputes the stages after it); "all" for every stage."""
    resume: bool = False
    """Reuse an existing run name even if its task differs (its record is replaced)."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    """How the local vLLM server is started. On CPU its KV cache is sized for `max_num_seqs` (32 unless set)
    sequences of `max_model_len` tokens: above a default run's largest batch (a training step's `group_size` x
    `groups_per_step` = 8 rollouts; ~10 validation inputs x `eval_samples` 2 in baseline and evaluate); a
    larger batch waits in vLLM's queue, which on a few CPU cores costs little throughput."""
