"""A checkpoint as a Hugging Face model directory: the base model with the LoRA merged into its weights
(`write_merged`: loads with `AutoModelForCausalLM.from_pretrained`, serves in vLLM or TGI as any model does), or
the LoRA alone as a PEFT adapter (`write_adapter`: `PeftModel.from_pretrained(base, DIR)`). Either carries the base
model's tokenizer with the chat template the checkpoint was trained with, and a generation config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..errors import AutoRLError
from ..serving.embedded import CHAT_TEMPLATE_FILE
from ..serving.merge import LoraMerger

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
"""A PEFT LoRA checkpoint's files (`autorl.training.checkpoints`)."""
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "tokenizer.model",
    "vocab.json", "merges.txt", CHAT_TEMPLATE_FILE,
)  # fmt: skip
"""The files of a Hugging Face tokenizer, whichever of them a base model has."""
GENERATION_CONFIG = "generation_config.json"
CONFIG = "config.json"


def chat_template(base_dir: Path) -> str:
    """The base model's chat template (its chat_template.jinja, else its tokenizer config's); one error line
    when it has none (an export without one would answer in another format than it was trained in)."""
    path = Path(base_dir) / CHAT_TEMPLATE_FILE
    if path.is_file():
        return path.read_text(encoding="utf-8")
    config_path = Path(base_dir) / "tokenizer_config.json"
    template = json.loads(config_path.read_text()).get("chat_template") if config_path.is_file() else None
    if not isinstance(template, str):
        raise AutoRLError(f"base model {base_dir} has no chat template; an export needs the one it was trained with")
    return template


def stop_tokens(base_dir: Path) -> list[str]:
    """The text of the tokens that end a turn (the tokenizer's end-of-sequence token)."""
    eos = json.loads((Path(base_dir) / "tokenizer_config.json").read_text()).get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    return [eos] if isinstance(eos, str) else []


def copy_tokenizer(base_dir: Path, out_dir: Path) -> None:
    """Copy the base model's tokenizer files and chat template (`chat_template`) into `out_dir`."""
    chat_template(base_dir)
    for name in TOKENIZER_FILES:
        if (Path(base_dir) / name).is_file():
            shutil.copyfile(Path(base_dir) / name, Path(out_dir) / name)


def generation_config(base_dir: Path) -> dict:
    """The base model's generation config, or one made from its config's special tokens."""
    path = Path(base_dir) / GENERATION_CONFIG
    if path.is_file():
        return json.loads(path.read_text())
    config = json.loads((Path(base_dir) / CONFIG).read_text())
    return {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(key) is not None}


def write_merged(base_dir: Path, adapter_dir: Path, out_dir: Path) -> None:
    """Write the base model with the LoRA of `adapter_dir` merged in (`autorl.serving.merge`), in the base
    weights' dtype, as `out_dir/model.safetensors`, with the base model's config, tokenizer and generation config."""
    LoraMerger(base_dir).write(adapter_dir, out_dir)
    config = json.loads((Path(base_dir) / CONFIG).read_text())
    config.pop("quantization_config", None)  # the merged weights are plain tensors
    (Path(out_dir) / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    _tokenizer_and_generation(base_dir, out_dir)


def write_adapter(base_dir: Path, adapter_dir: Path, out_dir: Path, base_name: str) -> None:
    """Copy the LoRA of `adapter_dir` as a PEFT adapter whose `base_model_name_or_path` is `base_name` (a Hugging
    Face id or a path: where `AutoPeftModelForCausalLM` finds the base), with the tokenizer and generation config."""
    for name in ADAPTER_FILES:
        shutil.copyfile(Path(adapter_dir) / name, Path(out_dir) / name)
    config = json.loads((Path(out_dir) / ADAPTER_FILES[0]).read_text())
    config["base_model_name_or_path"] = base_name
    (Path(out_dir) / ADAPTER_FILES[0]).write_text(json.dumps(config, indent=2) + "\n")
    _tokenizer_and_generation(base_dir, out_dir)


def _tokenizer_and_generation(base_dir: Path, out_dir: Path) -> None:
    copy_tokenizer(base_dir, out_dir)
    (Path(out_dir) / GENERATION_CONFIG).write_text(json.dumps(generation_config(base_dir), indent=2) + "\n")
