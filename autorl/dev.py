"""ART's expert settings (`art.dev`), read as autorl's configs.

`TrainableModel(_internal_config=InternalModelConfig(...))` and `model.train(..., _config=TrainConfig(...))`
take ART's dicts. What has a field in autorl lands there (`internal_config_updates`, `train_config_updates`);
what ART has and autorl does not is one warning line naming it, and is ignored, so ART code runs unchanged;
a `_config` key that ART does not have either is an error naming it.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from pydantic import ValidationError

from .config import ART_FIELD_NAMES
from .config import TrainConfig as AutoRLTrainConfig
from .errors import AutoRLError, UnsupportedArgumentError, refusing

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
    enforce_eager: bool


class PeftArgs(TypedDict, total=False):
    """ART's LoRA arguments; autorl reads those with a `TrainerConfig` field (`PEFT_FIELDS`)."""

    r: int
    lora_alpha: int
    lora_dropout: float
    target_modules: list[str]
    random_state: int


class LoRAConfig(TypedDict, total=False):
    """ART's LoRA settings of a model (`TrainableModel(lora_config=...)`); autorl reads every key (`LORA_FIELDS`)."""

    rank: int
    alpha: int
    target_modules: list[str]
    dropout: float
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
    lora_config: LoRAConfig


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
    ("engine_args", "enforce_eager"): "enforce_eager",
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
LORA_FIELDS = {"rank": "lora_rank", "alpha": "lora_alpha", "target_modules": "target_modules",
               "dropout": "lora_dropout", "random_state": "seed"}  # fmt: skip
"""ART's `LoRAConfig` keys (`TrainableModel(lora_config=...)`, `_internal_config["lora_config"]`) and the
`TrainerConfig` fields they set."""
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
            elif section == "lora_config" and key in LORA_FIELDS:
                trainer[LORA_FIELDS[key]] = value
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


def lora_config_updates(config: LoRAConfig | dict[str, Any]) -> dict[str, Any]:
    """The `TrainerConfig` fields that ART's `LoRAConfig` sets; a key autorl has no setting for is one
    `UnsupportedArgumentError` line naming it."""
    unknown = sorted(set(config) - set(LORA_FIELDS))
    if unknown:
        raise UnsupportedArgumentError(
            f"lora_config: autorl has no setting {unknown[0]!r} (it reads {sorted(LORA_FIELDS)})"
        )
    return {LORA_FIELDS[key]: value for key, value in config.items()}


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


ART_KEYWORDS_AT_DEFAULT: dict[str, Any] = {
    "advantage_balance": 0.0, "kl_penalty_reference_step": None, "kl_ref_adapter_path": None,
    "kl_penalty_source": "current_learner", "max_negative_advantage_importance_sampling_weight": None,
    "mask_prob_ratio": False, "kimi_k2_tau": None, "truncated_importance_sampling": None,
    "scale_learning_rate_by_reward_std_dev": False, "num_trajectories_learning_rate_multiplier_power": 0.0,
    "loss_fn_config": None, "adam_params": None,
}  # fmt: skip
"""Keywords of ART's `backend.train` that change what is learned and that autorl has no setting for: accepted at
ART's default (which is what autorl computes), one `UnsupportedArgumentError` line at any other value."""
ART_KEYWORDS_WITHOUT_EFFECT = frozenset({
    "allow_training_without_logprobs", "precalculate_logprobs", "logprob_calculation_chunk_size",
    "packed_sequence_length", "plot_tensors", "optimizer_save_interval",
})  # fmt: skip
"""Keywords of ART's `backend.train` that set how ART computes a step, not what it learns: any value is accepted
and changes nothing here. autorl trains rollouts without logprobs always (the current policy's stand in, as
ART's `precalculate_logprobs` computes them), packs no sequences, and saves the optimizer state every step."""
LOSS_FNS = {"cispo": "cispo", "ppo": "grpo"}
"""ART's `loss_fn` values, as `TrainConfig.loss`: ppo is the clipped token-level objective, autorl's grpo."""


def train_keywords(config: AutoRLTrainConfig | None, keywords: dict[str, Any]) -> tuple[AutoRLTrainConfig, bool, bool]:
    """The `TrainConfig` that ART's keywords of `backend.train(model, groups, **keywords)` ask for, over `config`
    (what it leaves unset stays autorl's default), with `verbose` and `save_checkpoint`, in that order.

    Keywords: any `TrainConfig` field, and ART's: `learning_rate`, `epsilon` (None: the loss's default),
    `epsilon_high`, `scale_rewards` (a bool, or group/batch/none), `normalize_advantages` (False: rewards are
    centred, not scaled), `kl_penalty_coef` (`kl_beta`), `loss_fn` (cispo, ppo), `importance_sampling_level`
    (token; sequence: GSPO), `verbose`, `save_checkpoint`, and those of `ART_KEYWORDS_AT_DEFAULT` and
    `ART_KEYWORDS_WITHOUT_EFFECT`. Anything else, or a value autorl cannot honour, is one
    `UnsupportedArgumentError` line naming it.
    """
    keywords = dict(keywords)
    verbose = bool(keywords.pop("verbose", False))
    save_checkpoint = bool(keywords.pop("save_checkpoint", True))
    for name in ART_KEYWORDS_WITHOUT_EFFECT & set(keywords):
        del keywords[name]
    for name, default in ART_KEYWORDS_AT_DEFAULT.items():
        if name in keywords and keywords.pop(name) != default:
            raise UnsupportedArgumentError(
                f"backend.train({name}=...): autorl has no such setting (it computes ART's default, {default!r}); "
                "see docs/art-api.md"
            )
    if keywords.get("epsilon", 0.0) is None:
        del keywords["epsilon"]
    if keywords.pop("normalize_advantages", True) is False:
        keywords["scale_rewards"] = "none"
    if "loss_fn" in keywords:
        loss_fn = keywords.pop("loss_fn")
        if loss_fn not in LOSS_FNS:
            raise UnsupportedArgumentError(f"backend.train(loss_fn={loss_fn!r}): autorl has {sorted(LOSS_FNS)}")
        keywords["loss"] = LOSS_FNS[loss_fn]
    level = keywords.pop("importance_sampling_level", "token")
    if level == "sequence":
        if keywords.get("loss", "gspo") not in ("gspo", "grpo"):
            raise UnsupportedArgumentError(
                f"backend.train(importance_sampling_level='sequence') with loss {keywords['loss']!r}: autorl's "
                "sequence-level ratio is GSPO's (loss_fn='ppo')"
            )
        keywords["loss"] = "gspo"
    elif level != "token":
        raise UnsupportedArgumentError(
            f"backend.train(importance_sampling_level={level!r}): autorl has 'token' and 'sequence'"
        )
    unknown = sorted(set(keywords) - set(AutoRLTrainConfig.model_fields) - set(ART_FIELD_NAMES))
    if unknown:
        raise UnsupportedArgumentError(f"backend.train() got an unexpected keyword argument {unknown[0]!r}")
    given = config.model_dump(exclude_unset=True) if config is not None else {}
    try:
        return AutoRLTrainConfig.model_validate({**given, **keywords}), verbose, save_checkpoint
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "config"
        raise UnsupportedArgumentError(f"backend.train({where}=...): {error['msg']}") from None


_TINKER = "autorl has no Tinker backend, so no Tinker settings; see autorl.tinker"
__getattr__ = refusing("autorl.dev", {"TinkerArgs": _TINKER, "TinkerTrainingClientArgs": _TINKER,
                                      "TinkerNativeArgs": _TINKER})  # fmt: skip
