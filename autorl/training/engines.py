"""Trainer engines: how the policy (frozen base model + trainable LoRA) is loaded for training.

One objective, two loaders (`TrainerConfig.engine`): `peft` (transformers + PEFT, on CPU or a GPU) and
`unsloth` (Unsloth's `FastLanguageModel` on a CUDA GPU: its fused kernels and gradient checkpointing).
Both return a PEFT `PeftModel` with the LoRA that `TrainerConfig` describes, which `GRPOTrainer` trains
with the same loss and saves as a standard PEFT adapter: vLLM loads it, and either engine resumes from
the other's checkpoints.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..config import TrainerConfig
from ..errors import AutoRLError
from ..serving.config import cuda_available

if TYPE_CHECKING:
    import torch
    from peft import LoraConfig, PeftModel

log = logging.getLogger(__name__)

EngineName = Literal["peft", "unsloth"]


def unsloth_installed() -> bool:
    """Whether Unsloth can be imported (found without importing it: importing it patches transformers)."""
    return importlib.util.find_spec("unsloth") is not None


def resolve_engine(engine: str) -> EngineName:
    """The engine `TrainerConfig.engine` names, with "auto" resolved: unsloth on a CUDA machine where it
    is installed, else peft. Raises AutoRLError (one line) for unsloth where it cannot run."""
    if engine == "peft":
        return "peft"
    if engine == "auto":
        return "unsloth" if cuda_available() and unsloth_installed() else "peft"
    if not cuda_available():
        raise AutoRLError(
            'trainer engine "unsloth" needs a CUDA GPU and this machine has none; use engine "peft" or "auto"'
        )
    if not unsloth_installed():
        raise AutoRLError('trainer engine "unsloth" is not installed: pip install -e ".[gpu]" (or use engine "peft")')
    return "unsloth"


def load_peft(
    model_dir: Path, checkpoint: Path | None, config: TrainerConfig, dtype: torch.dtype, device: torch.device
) -> PeftModel:
    """The base model with a new LoRA (or the one saved in `checkpoint`, trainable), via transformers + PEFT."""
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    if checkpoint is None:
        return get_peft_model(base, lora_config(config))
    return PeftModel.from_pretrained(base, checkpoint, is_trainable=True)


def load_unsloth(
    model_dir: Path, checkpoint: Path | None, config: TrainerConfig, dtype: torch.dtype, device: torch.device
) -> PeftModel:
    """The same, via Unsloth's `FastLanguageModel` (16-bit weights, Unsloth's gradient checkpointing); a
    checkpoint's adapter is attached to the base model with PEFT, trainable, on Unsloth's patched model."""
    from peft import PeftModel
    from unsloth import FastLanguageModel

    base, _ = FastLanguageModel.from_pretrained(str(model_dir), dtype=dtype, load_in_4bit=False)
    if checkpoint is None:
        return FastLanguageModel.get_peft_model(
            base,
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=config.target_modules,
            bias="none",
            use_gradient_checkpointing="unsloth",
            random_state=config.seed,
        )
    model = PeftModel.from_pretrained(base, checkpoint, is_trainable=True)
    FastLanguageModel.for_training(model)
    return model


LOADERS = {"peft": load_peft, "unsloth": load_unsloth}
"""Each engine's loader: (model_dir, checkpoint or None, TrainerConfig, torch dtype, torch device) -> PeftModel."""


def lora_config(config: TrainerConfig) -> LoraConfig:
    """The PEFT LoRA that `TrainerConfig` describes (rank, alpha, dropout, target modules)."""
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
        task_type="CAUSAL_LM",
    )


def check_target_modules(model_dir: Path, target_modules: list[str]) -> None:
    """One `AutoRLError` line naming the first of `target_modules` that names no module of the base model at
    `model_dir` a LoRA can wrap (a linear, embedding or convolution layer), matched as PEFT matches them: the
    module's dotted name or its end (`q_proj`, `layers.0.self_attn.q_proj`). The model is built from its
    config.json on the meta device: no weights are read. A model transformers cannot build from its config
    (custom code) is not checked here: the trainer's own error says what is wrong."""
    import torch  # heavy: loaded where a model is checked, not where configs are read
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    try:
        with torch.device("meta"):
            base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    except (ValueError, OSError, KeyError, ImportError) as exc:
        log.info("the target modules of %s are not checked before training (%s)", model_dir, exc)
        return
    wrappable = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, Conv1D)
    names = [name for name, module in base.named_modules() if isinstance(module, wrappable)]
    for target in target_modules:
        if not any(name == target or name.endswith(f".{target}") for name in names):
            known = sorted({name.rpartition(".")[2] for name in names})
            raise AutoRLError(
                f"target module {target!r} is not a layer of the base model a LoRA can wrap; its layers: "
                f"{', '.join(known[:20])}{', ...' if len(known) > 20 else ''}"
            )
