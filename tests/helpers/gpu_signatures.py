"""The parameters of the Unsloth functions autorl calls, as the release the `gpu` extra pins defines them: Unsloth
needs CUDA and cannot be installed on the CPU machines the suite runs on, so they are read from its wheel's source
(not imported) and recorded here; tests/test_gpu_path.py checks autorl's calls against them, and that the pin in
pyproject.toml is still the release recorded (a new pin needs a new record: run this file).

    pip download --no-deps unsloth==VERSION -d DIR && python tests/helpers/gpu_signatures.py DIR/unsloth-*.whl

A name `*args` or `**kwargs` is a variadic parameter: an argument only it would take is not one Unsloth names."""

from __future__ import annotations

import ast
import sys
import zipfile

UNSLOTH_VERSION = "2026.10.9"
UNSLOTH = {
    "FastLanguageModel.from_pretrained": [
        "model_name", "max_seq_length", "dtype", "load_in_4bit", "load_in_8bit", "load_in_16bit", "full_finetuning",
        "token", "device_map", "device_map_planner_kwargs", "rope_scaling", "fix_tokenizer", "trust_remote_code",
        "use_gradient_checkpointing", "resize_model_vocab", "revision", "use_exact_model_name", "offload_embedding",
        "float32_mixed_precision", "fast_inference", "gpu_memory_utilization", "float8_kv_cache", "random_state",
        "max_lora_rank", "disable_log_stats", "qat_scheme", "load_in_fp8", "unsloth_tiled_mlp", "text_only", "*args",
        "on_model_resolved", "**kwargs",
    ],
    "FastLanguageModel.get_peft_model": [  # functools.wraps(FastLlamaModel.get_peft_model): its signature
        "model", "r", "target_modules", "lora_alpha", "lora_dropout", "bias", "layers_to_transform", "layers_pattern",
        "finetune_last_n_layers", "use_gradient_checkpointing", "random_state", "max_seq_length", "use_rslora",
        "modules_to_save", "init_lora_weights", "loftq_config", "temporary_location", "qat_scheme",
        "target_parameters", "ensure_weight_tying", "offload_layers", "checkpoint_skip_layers", "**kwargs",
    ],
    "FastLanguageModel.patch_peft_model": ["model", "use_gradient_checkpointing"],  # FastLlamaModel's, inherited
    "FastLanguageModel.for_training": ["model", "use_gradient_checkpointing"],
}  # fmt: skip
"""Each function's parameters, in order (Unsloth's source: models/loader.py, models/llama.py)."""
SOURCES = {
    "FastLanguageModel.from_pretrained": ("unsloth/models/loader.py", "FastLanguageModel", "from_pretrained"),
    "FastLanguageModel.get_peft_model": ("unsloth/models/llama.py", "FastLlamaModel", "get_peft_model"),
    "FastLanguageModel.patch_peft_model": ("unsloth/models/llama.py", "FastLlamaModel", "patch_peft_model"),
    "FastLanguageModel.for_training": ("unsloth/models/loader.py", "FastLanguageModel", "for_training"),
}
"""Where each is defined in the wheel: file, class, method."""


def parameters(source: str, cls: str, method: str) -> list[str]:
    """The parameters of `cls.method` as `source` defines it (Python source, parsed, not run)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for function in node.body:
                if isinstance(function, ast.FunctionDef) and function.name == method:
                    a = function.args
                    names = [x.arg for x in [*a.posonlyargs, *a.args]]
                    names += [f"*{a.vararg.arg}"] if a.vararg else []
                    names += [x.arg for x in a.kwonlyargs]
                    return names + ([f"**{a.kwarg.arg}"] if a.kwarg else [])
    raise LookupError(f"{cls}.{method} not found")


def named(function: str, kwargs: dict) -> list[str]:
    """The keyword arguments of `kwargs` that the recorded `function` has no named parameter for (a renamed or
    misspelled argument, which its `**kwargs` would swallow)."""
    return [key for key in kwargs if key not in UNSLOTH[function]]


if __name__ == "__main__":
    with zipfile.ZipFile(sys.argv[1]) as wheel:
        for name, (path, cls, method) in SOURCES.items():
            print(name, parameters(wheel.read(path).decode(), cls, method))
