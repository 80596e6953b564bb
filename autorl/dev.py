"""ART's expert settings (`art.dev`), read as autorl's configs.

`TrainableModel(_internal_config=InternalModelConfig(...))` and `model.train(..., _config=TrainConfig(...))`
take ART's dicts. What has a field in autorl lands there (`internal_config_updates`, `train_config_updates`).
Of `_internal_config`, what ART has and autorl does not is one warning line naming it, and is ignored. Every
training setting of ART's is computed by ART's formula (`train_settings`) or, where it cannot apply here,
refused in one line naming why (docs/art-api.md's table); a `_config` key that ART does not have either is an
error naming it.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from pydantic import ValidationError

from .config import ART_FIELD_NAMES, ART_TRAIN_SETTINGS
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
    """ART's `_config` of `model.train` (`art.dev.TrainConfig`); `train_settings` says what each key sets."""

    advantage_balance: float
    allow_training_without_logprobs: bool
    epsilon: float
    epsilon_high: float | None
    importance_sampling_level: str
    kimi_k2_tau: float | None
    kl_penalty_coef: float
    kl_penalty_reference_step: int | None
    kl_penalty_source: str
    kl_penalty_step_lag: int | None
    kl_ref_adapter_path: str | None
    logprob_calculation_chunk_size: int
    mask_prob_ratio: bool
    max_negative_advantage_importance_sampling_weight: float
    moe_routing_replay_bundle: object
    moe_routing_replay_path: str | None
    moe_routing_replay_strict: bool
    num_trajectories_learning_rate_multiplier_power: float
    packed_sequence_length: int | None
    plot_tensors: bool
    ppo: bool
    precalculate_logprobs: bool
    scale_learning_rate_by_reward_std_dev: bool
    scale_rewards: bool
    truncated_importance_sampling: float | None


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
SAME_NAME_FIELDS = tuple(name for name in ART_TRAIN_SETTINGS if name != "truncated_importance_sampling")
"""ART's training settings that are `autorl.TrainConfig` fields of the same name and formula."""
_MOE = "MoE routing replay is Megatron's (expert routes recorded at sampling); autorl trains dense LoRAs"
_KL_REF = "autorl's KL reference is the base model (the LoRA switched off), not another checkpoint"
REFUSED_UNLESS_DEFAULT: dict[str, tuple[Any, str]] = {
    "packed_sequence_length": (None, "autorl packs no sequences: it pads micro-batches (TrainConfig.micro_batch_size)"),
    "plot_tensors": (False, "autorl packs no tensors to plot; a step's figures are its history.jsonl line"),
    "logprob_calculation_chunk_size": (1024, "autorl's logprob chunk is a model's setting, "
                                             "TrainerConfig.logprob_chunk_tokens (1024 unless set)"),
    "moe_routing_replay_bundle": (None, _MOE),
    "moe_routing_replay_path": (None, _MOE),
    "kl_ref_adapter_path": (None, _KL_REF),
    "kl_penalty_reference_step": (None, _KL_REF),
    "kl_penalty_step_lag": (None, _KL_REF),
    "kl_penalty_source": ("current_learner", "autorl's KL penalty is the policy being trained against the base "
                                             "model (ART's 'current_learner')"),
}  # fmt: skip
"""ART's settings that cannot apply here: accepted at ART's default (what autorl computes), one
`UnsupportedArgumentError` line naming why at any other value."""
ACCEPTED_WITHOUT_EFFECT = frozenset({"allow_training_without_logprobs", "moe_routing_replay_strict"})
"""ART's settings accepted at any value: autorl trains rollouts without logprobs always (their ratio is 1
against the current policy, as ART's True does), and `moe_routing_replay_strict` only qualifies a routing
replay, which is refused."""
ART_TRAIN_KEYS = frozenset({*TRAIN_FIELDS, *SAME_NAME_FIELDS, *REFUSED_UNLESS_DEFAULT, *ACCEPTED_WITHOUT_EFFECT,
                            "ppo", "precalculate_logprobs", "truncated_importance_sampling"})  # fmt: skip
"""Every key of ART's `dev.TrainConfig` (ART 0.5 and 2026)."""


def train_settings(config: TrainConfig | dict[str, Any], where: str = "model.train(_config=...)") -> dict[str, Any]:
    """The `autorl.TrainConfig` fields that ART's training settings (`dev.TrainConfig` keys; `backend.train`'s
    keywords of those names) set, by ART's formulas (`loss.py`):

    - `ppo`: True, the clipped objective (grpo) with ART's epsilon_high default (= epsilon); False, ART's
      clipped-weight REINFORCE, cispo, whose cap is 1 + ART's epsilon_high (autorl's cispo caps at
      epsilon_high itself); unset, autorl's own default loss.
    - `precalculate_logprobs`: the ratio against the policy before the update
      (`importance_sampling_correction`), its importance weights capped at `truncated_importance_sampling`
      (`importance_sampling_cap`; none without it); without it `truncated_importance_sampling` is the
      field of that name (weights min(r, C)).
    - `SAME_NAME_FIELDS` and `TRAIN_FIELDS` set their fields; `REFUSED_UNLESS_DEFAULT` are one
      `UnsupportedArgumentError` line away from ART's default; `ACCEPTED_WITHOUT_EFFECT` are accepted.
    A key outside `ART_TRAIN_KEYS` is left to the caller."""
    for key, (default, why) in REFUSED_UNLESS_DEFAULT.items():
        if config.get(key, default) != default:
            raise UnsupportedArgumentError(f"{where}: {key}={config[key]!r} cannot apply: {why}")
    updates = {field: config[key] for key, field in TRAIN_FIELDS.items() if key in config}
    updates |= {key: config[key] for key in SAME_NAME_FIELDS if key in config}
    if "ppo" in config:
        updates["loss"] = "grpo" if config["ppo"] else "cispo"
        if config["ppo"] and config.get("epsilon_high") is None:
            updates["epsilon_high"] = None  # ART's PPO: the upper range is epsilon's
        elif not config["ppo"] and config.get("epsilon_high") is not None:
            updates["epsilon_high"] = 1 + config["epsilon_high"]  # ART's cap is 1 + epsilon_high
    elif updates.get("epsilon_high", 0) is None:
        del updates["epsilon_high"]
    cap = config.get("truncated_importance_sampling")
    if config.get("precalculate_logprobs"):
        updates |= {"importance_sampling_correction": True, "importance_sampling_cap": cap}
    elif cap is not None:
        updates["truncated_importance_sampling"] = cap
    return updates


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


OPENAI_SERVER_FIELDS = {
    **{("engine_args", key): field for (section, key), field in SERVER_FIELDS.items() if section == "engine_args"},
    ("server_args", "host"): "host",
    ("server_args", "port"): "port",
    ("server_args", "tool_call_parser"): "tool_call_parser",
}
"""ART's `register(backend, _openai_client_config={...})` keys that set a `ServerConfig` field of the model's server."""


def openai_server_config_updates(config: dict[str, Any]) -> dict[str, Any]:
    """The `ServerConfig` fields that ART's `_openai_client_config` (`art.dev.OpenAIServerConfig`: `engine_args`,
    `server_args`, `log_file`) sets. `server_args.enable_auto_tool_choice` True is autorl's default (tool calls are
    parsed with `tool_call_parser`), False turns parsing off. Any other key is one `UnsupportedArgumentError` line
    naming it: `log_file` (the server's log is `<model dir>/logs/vllm.log`), `api_key` (autorl makes a key per
    server), the CORS, SSL and LoRA-module arguments."""
    updates: dict[str, Any] = {}
    for section, values in config.items():
        if section not in ("engine_args", "server_args") or not isinstance(values, dict):
            raise UnsupportedArgumentError(
                f"_openai_client_config: autorl has no setting {section!r} (it reads engine_args and server_args; "
                "the server's log is <model dir>/logs/vllm.log)"
            )
        for key, value in values.items():
            if (section, key) in OPENAI_SERVER_FIELDS:
                updates[OPENAI_SERVER_FIELDS[section, key]] = value
            elif (section, key) == ("server_args", "enable_auto_tool_choice"):
                if not value:
                    updates["tool_call_parser"] = None
            else:
                known = ", ".join(
                    f"{s}.{k}" for s, k in [*OPENAI_SERVER_FIELDS, ("server_args", "enable_auto_tool_choice")]
                )
                raise UnsupportedArgumentError(
                    f"_openai_client_config: autorl has no setting {section}.{key} (it reads {known})"
                )
    return updates


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
    """The `autorl.TrainConfig` fields that ART's `_config` of `model.train` sets (`train_settings`); a key ART
    does not know either raises AutoRLError, one ART's that cannot apply here `UnsupportedArgumentError`."""
    unknown = sorted(set(config) - ART_TRAIN_KEYS)
    if unknown:
        raise AutoRLError(f"model.train(_config=...): unknown key {unknown[0]!r} (ART's keys: "
                          f"{', '.join(sorted(ART_TRAIN_KEYS))})")  # fmt: skip
    return train_settings(config)


ART_KEYWORDS_AT_DEFAULT: dict[str, Any] = {"loss_fn_config": None, "adam_params": None}
"""Keywords of ART's `backend.train` that ART's LocalBackend itself refuses away from None: the same here."""
ART_KEYWORDS_WITHOUT_EFFECT = frozenset({"optimizer_save_interval", "grad_accumulation_sequences"})
"""Keywords of ART's `backend.train` that set how ART computes a step, not what it learns: any value is accepted
and changes nothing here (autorl saves the optimizer state every step, and accumulates a step's gradients over
its micro-batches, `TrainConfig.micro_batch_size`)."""
LOSS_FNS = {"cispo": False, "ppo": True}
"""ART's `loss_fn` values, as its `ppo` setting (`train_settings`)."""


def train_keywords(config: AutoRLTrainConfig | None, keywords: dict[str, Any]) -> tuple[AutoRLTrainConfig, bool, bool]:
    """The `TrainConfig` that ART's keywords of `backend.train(model, groups, **keywords)` ask for, over `config`
    (what it leaves unset stays autorl's default), with `verbose` and `save_checkpoint`, in that order.

    Keywords: any `TrainConfig` field, and ART's: `learning_rate`, `normalize_advantages` (False: rewards are
    centred, not scaled), `loss_fn` (cispo, ppo: ART's `ppo` setting), every key of ART's `dev.TrainConfig`
    (`train_settings`; `epsilon` None: the loss's default), `verbose`, `save_checkpoint`, and those of
    `ART_KEYWORDS_AT_DEFAULT` and `ART_KEYWORDS_WITHOUT_EFFECT`. Anything else, or a value autorl cannot
    honour, is one `UnsupportedArgumentError` line naming it.
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
        if keywords.get("ppo", LOSS_FNS[loss_fn]) != LOSS_FNS[loss_fn]:
            raise UnsupportedArgumentError(
                f"backend.train(loss_fn={loss_fn!r}, ppo={keywords['ppo']!r}): they conflict"
            )
        keywords["ppo"] = LOSS_FNS[loss_fn]
    art = {name: keywords.pop(name) for name in ART_TRAIN_KEYS & set(keywords)}
    keywords |= train_settings(art, "backend.train(...)")
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
