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
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from ..config import TrainerConfig
from ..errors import AutoRLError
from ..serving.config import cuda_available
from ..serving.environment import record_import_changes

if TYPE_CHECKING:
    import torch
    from peft import LoraConfig, PeftModel

log = logging.getLogger(__name__)

EngineName = Literal["peft", "unsloth"]


def unsloth_installed() -> bool:
    """Whether Unsloth can be imported (found without importing it: importing it patches transformers)."""
    return importlib.util.find_spec("unsloth") is not None


UNSLOTH_FIRST_BEFORE = ("transformers", "peft", "trl")
"""What Unsloth patches when it is imported, so must not be imported before it (else it runs unpatched: slower,
more memory, as its own warning says)."""
UNSLOTH_STATISTICS_ENV = "UNSLOTH_DISABLE_STATISTICS"
"""Unsloth's switch for its statistics request at import (a download from Hugging Face that can block a
firewalled machine for minutes, then raise): set to 1 by `import_unsloth` unless the environment sets it."""


def unsloth_import_plan(engine: EngineName, imported: set[str]) -> tuple[bool, list[str]]:
    """Whether to import Unsloth now, for the resolved `engine`, and which of `UNSLOTH_FIRST_BEFORE` are already
    among the `imported` modules (then Unsloth cannot patch them: a warning says so)."""
    if engine != "unsloth" or "unsloth" in imported:
        return False, []
    return True, [name for name in UNSLOTH_FIRST_BEFORE if name in imported]


def import_unsloth() -> ModuleType:
    """Unsloth, imported once with its statistics request off (`UNSLOTH_STATISTICS_ENV`); the environment
    variables its import sets or changes are recorded (`autorl.serving.environment.record_import_changes`)
    and kept out of the vLLM servers started afterwards, so they start as the ones before did."""
    if "unsloth" in sys.modules:
        return sys.modules["unsloth"]
    os.environ.setdefault(UNSLOTH_STATISTICS_ENV, "1")
    before = dict(os.environ)
    import unsloth

    record_import_changes(before, dict(os.environ))
    return unsloth


def prepare_engine(engine: str) -> EngineName:
    """Resolve `TrainerConfig.engine` at the start of a run or a trainer's process, and where it is Unsloth,
    import Unsloth before anything imports transformers or peft (`unsloth_import_plan`). Returns the engine."""
    name = resolve_engine(engine)
    now, late = unsloth_import_plan(name, set(sys.modules))
    if now:
        if late:
            log.warning("%s imported before Unsloth: Unsloth cannot patch them (slower, more memory)", ", ".join(late))
        import_unsloth()
    return name


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
        raise AutoRLError('trainer engine "unsloth" is not installed: ./install.sh --gpu (or use engine "peft")')
    return "unsloth"


def load_peft(
    model_dir: Path,
    checkpoint: Path | None,
    config: TrainerConfig,
    dtype: torch.dtype,
    device: torch.device,
    max_seq_length: int,
) -> PeftModel:
    """The base model with a new LoRA (or the one saved in `checkpoint`, trainable), via transformers + PEFT
    (`max_seq_length` is Unsloth's: PEFT takes any length the model does)."""
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    if checkpoint is None:
        return get_peft_model(base, lora_config(config))
    return PeftModel.from_pretrained(base, checkpoint, is_trainable=True)


DEFAULT_MAX_SEQ_LENGTH = 2048
"""The longest sequence a trainer takes where its caller names none: `ServerConfig.max_model_len`'s default."""


def cuda_training_dtype(native_bf16_gpu: bool) -> torch.dtype:
    """The base weights' dtype on a CUDA GPU (`TrainerConfig.dtype` "auto"): bfloat16 where the GPU computes it
    natively (compute capability 8 and up: `torch.cuda.is_bf16_supported(including_emulation=False)`), else
    float32. torch's plain `is_bf16_supported()` counts emulation, so a T4 or V100 would train in emulated
    bfloat16, slowly; float16 would need loss scaling, which this trainer has not."""
    import torch

    return torch.bfloat16 if native_bf16_gpu else torch.float32


def training_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype of the frozen base weights for `TrainerConfig.dtype` on `device` ("auto" resolved)."""
    import torch

    from ..cpu import native_bf16

    if dtype != "auto":
        return getattr(torch, dtype)
    if device.type == "cuda":
        return cuda_training_dtype(torch.cuda.is_bf16_supported(including_emulation=False))
    return torch.bfloat16 if device.type == "cpu" and native_bf16() else torch.float32


UNSLOTH_CHECKPOINTING = "unsloth"
"""Unsloth's gradient checkpointing (its own offloaded variant), the one its loaders default to."""


def unsloth_load_args(model_dir: Path, dtype: torch.dtype, device: torch.device, max_seq_length: int) -> dict:
    """The keyword arguments of Unsloth's `FastLanguageModel.from_pretrained` for the base model: 16-bit weights,
    on `device` (Unsloth's default device map is "sequential": GPU 0 first, whatever the trainer's device), and
    `max_seq_length`, the longest sequence the trainer takes (the server's `max_model_len`), past which
    Unsloth's fast forward cuts the inputs (its default: 2048)."""
    index = device.index if device.index is not None else 0
    return {
        "model_name": str(model_dir),
        "max_seq_length": max_seq_length,
        "dtype": dtype,
        "load_in_4bit": False,
        "device_map": {"": f"cuda:{index}"} if device.type == "cuda" else {"": device.type},
    }


def unsloth_lora_args(config: TrainerConfig) -> dict:
    """The keyword arguments of Unsloth's `FastLanguageModel.get_peft_model` for a new LoRA."""
    return {
        "r": config.lora_rank,
        "lora_alpha": config.lora_alpha,
        "lora_dropout": config.lora_dropout,
        "target_modules": config.target_modules,
        "bias": "none",
        "use_gradient_checkpointing": UNSLOTH_CHECKPOINTING,
        "random_state": config.seed,
    }


def load_unsloth(
    model_dir: Path,
    checkpoint: Path | None,
    config: TrainerConfig,
    dtype: torch.dtype,
    device: torch.device,
    max_seq_length: int,
) -> PeftModel:
    """The same, via Unsloth's `FastLanguageModel` (16-bit weights, Unsloth's gradient checkpointing). A
    checkpoint's adapter is attached as Unsloth's own loader attaches one (PEFT's `from_pretrained`, trainable,
    then `patch_peft_model`: its fast LoRA kernels and the hook that gives the checkpointed inputs a gradient),
    not by its path: the adapter's recorded base may be a directory that has moved since."""
    from peft import PeftModel

    FastLanguageModel = import_unsloth().FastLanguageModel
    base, _ = FastLanguageModel.from_pretrained(**unsloth_load_args(model_dir, dtype, device, max_seq_length))
    if checkpoint is None:
        return FastLanguageModel.get_peft_model(base, **unsloth_lora_args(config))
    model = PeftModel.from_pretrained(base, checkpoint, is_trainable=True)
    model = FastLanguageModel.patch_peft_model(model, use_gradient_checkpointing=UNSLOTH_CHECKPOINTING)
    FastLanguageModel.for_training(model)
    return model


def check_sequence_lengths(lengths: list[int], max_seq_length: int, engine: EngineName) -> None:
    """One `AutoRLError` line when a sequence is longer than Unsloth's `max_seq_length` (its fast forward would cut
    it, and the logprobs would no longer match the tokens); PEFT takes any length."""
    longest = max(lengths, default=0)
    if engine == "unsloth" and longest > max_seq_length:
        raise AutoRLError(
            f"a training sequence of {longest} tokens is longer than the trainer's max_seq_length {max_seq_length} "
            "(the server's max_model_len); raise max_model_len"
        )


LOADERS = {"peft": load_peft, "unsloth": load_unsloth}
"""Each engine's loader: (model_dir, checkpoint or None, TrainerConfig, torch dtype, torch device, the longest
sequence it trains) -> PeftModel."""


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
