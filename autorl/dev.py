"""ART's expert settings (`art.dev`), read as autorl's configs.

`TrainableModel(_internal_config=InternalModelConfig(...))` and `model.train(..., _config=TrainConfig(...))`
take ART's dicts. What has a field in autorl lands there (`internal_config_updates`, `train_config_updates`);
what ART has and autorl does not is one warning line naming it, and is ignored, so ART code runs unchanged;
a `_config` key that ART does not have either is an error naming it.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from .errors import AutoRLError

log = logging.getLogger("autorl")


class InitArgs(TypedDict, total=False):
    """ART's model loading arguments (Unsloth's); autorl reads `max_seq_length`, `max_lora_rank` and
    `gpu_memory_utilization`."""

    max_seq_length: int
    max_lora_rank: int
    gpu_memory_utilization: float


class EngineArgs(TypedDict, total=False):
    """ART's vLLM engine arguments; autorl reads those with a `ServerConfig` field (`SERVER_FIELDS`)."""

    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_lora_rank: int
    max_loras: int
    dtype: str


class PeftArgs(TypedDict, total=False):
    """ART's LoRA arguments; autorl reads those with a `TrainerConfig` field (`PEFT_FIELDS`)."""

    r: int
    lora_alpha: int
    lora_dropout: float
    target_modules: list[str]
    random_state: int


class TrainerArgs(TypedDict, total=False):
    """ART's trainer arguments (Hugging Face TrainingArguments); none has a per-model field in autorl (the
    learning rate and the gradient clip are `TrainConfig`'s, per `model.train` call)."""


class InternalModelConfig(TypedDict, total=False):
    """ART's `_internal_config` of a `TrainableModel`."""

    init_args: InitArgs
    engine_args: EngineArgs
    peft_args: PeftArgs
    trainer_args: TrainerArgs


class TrainConfig(TypedDict, total=False):
    """ART's `_config` of `model.train`; autorl reads the keys of `TRAIN_FIELDS`."""

    allow_training_without_logprobs: bool
    epsilon: float
    epsilon_high: float | None
    importance_sampling_level: str
    kl_penalty_coef: float
    scale_rewards: bool


SERVER_FIELDS = {
    ("engine_args", "gpu_memory_utilization"): "gpu_memory_utilization",
    ("init_args", "gpu_memory_utilization"): "gpu_memory_utilization",
    ("engine_args", "max_model_len"): "max_model_len",
    ("init_args", "max_seq_length"): "max_model_len",
    ("engine_args", "max_num_seqs"): "max_num_seqs",
    ("engine_args", "max_lora_rank"): "max_lora_rank",
    ("init_args", "max_lora_rank"): "max_lora_rank",
    ("engine_args", "max_loras"): "max_loras",
    ("engine_args", "dtype"): "dtype",
}
"""`_internal_config` keys that set a `ServerConfig` field of the model's server (`TrainableModel.server`)."""
PEFT_FIELDS = {
    "r": "lora_rank",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "target_modules": "target_modules",
    "random_state": "seed",
}
"""`_internal_config.peft_args` keys that set a `TrainerConfig` field (`TrainableModel.trainer`)."""
TRAIN_FIELDS = {"epsilon": "epsilon", "epsilon_high": "epsilon_high", "scale_rewards": "scale_rewards",
                "kl_penalty_coef": "kl_beta"}  # fmt: skip
"""`_config` keys that set the `autorl.TrainConfig` field of the same meaning."""
ART_TRAIN_KEYS_WITHOUT_EFFECT = frozenset({
    "advantage_balance", "kimi_k2_tau", "kl_penalty_reference_step", "kl_penalty_source", "kl_penalty_step_lag",
    "kl_ref_adapter_path", "logprob_calculation_chunk_size", "mask_prob_ratio",
    "max_negative_advantage_importance_sampling_weight", "num_trajectories_learning_rate_multiplier_power",
    "packed_sequence_length", "plot_tensors", "ppo", "precalculate_logprobs", "scale_learning_rate_by_reward_std_dev",
    "truncated_importance_sampling",
})  # fmt: skip
"""ART's other `_config` keys: each is one warning line (autorl has no such setting) and is ignored."""


def internal_config_updates(config: InternalModelConfig | dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `ServerConfig` and `TrainerConfig` fields that ART's `_internal_config` sets, in that order. Keys
    without such a field are one warning line and ignored; so is `gpu_memory_utilization` on a machine
    without CUDA, where vLLM reads it as a share of a NUMA node's memory (see `ServerConfig`)."""
    server: dict[str, Any] = {}
    trainer: dict[str, Any] = {}
    ignored: list[str] = []
    for section, values in config.items():
        if not isinstance(values, dict):
            ignored.append(section)
            continue
        for key, value in values.items():
            if (section, key) in SERVER_FIELDS:
                server[SERVER_FIELDS[section, key]] = value
            elif section == "peft_args" and key in PEFT_FIELDS:
                trainer[PEFT_FIELDS[key]] = value
            else:
                ignored.append(f"{section}.{key}")
    if "gpu_memory_utilization" in server:
        from .serving.config import cuda_available  # torch: only for a config that asks for a GPU share

        if not cuda_available():
            del server["gpu_memory_utilization"]
            ignored.append("gpu_memory_utilization (no CUDA: size the KV cache with ServerConfig.kv_cache_bytes)")
    if ignored:
        log.warning("_internal_config: not supported by autorl, ignored: %s", ", ".join(ignored))
    return server, trainer


def train_config_updates(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    """The `autorl.TrainConfig` fields that ART's `_config` of `model.train` sets. ART's keys without an
    autorl setting are one warning line and ignored; a key ART does not know either raises AutoRLError."""
    unknown = sorted(set(config) - set(TRAIN_FIELDS) - ART_TRAIN_KEYS_WITHOUT_EFFECT
                     - {"allow_training_without_logprobs", "importance_sampling_level"})  # fmt: skip
    if unknown:
        known = ", ".join(sorted({*TRAIN_FIELDS, "allow_training_without_logprobs", "importance_sampling_level"}))
        raise AutoRLError(f"model.train(_config=...): unknown key {unknown[0]!r} (keys autorl reads: {known})")
    updates = {field: config[key] for key, field in TRAIN_FIELDS.items() if key in config}
    level = config.get("importance_sampling_level", "token")
    if level == "sequence":
        updates["loss"] = "gspo"  # one ratio per sequence: GSPO
    ignored = sorted(ART_TRAIN_KEYS_WITHOUT_EFFECT & set(config))
    if level not in ("token", "sequence"):
        ignored.append(f"importance_sampling_level={level!r}")
    if ignored:
        log.warning("model.train(_config=...): not supported by autorl, ignored: %s", ", ".join(ignored))
    return updates
