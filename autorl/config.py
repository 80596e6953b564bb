"""Configuration of training: per `model.train()` call (TrainConfig) and per model (TrainerConfig)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LossName = Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"]
"""The policy objectives `TrainConfig.loss` names (defined in `autorl.training.loss`)."""

ScaleRewards = Literal["group", "batch", "none"]
"""What divides the advantages (`TrainConfig.scale_rewards`)."""

TurnGrouping = Literal["auto", "state", "turn"]
"""Which turns a turn is compared with (`TrainConfig.turn_advantage_grouping`)."""
RatioLevel = Literal["token", "sequence", "average", "geometric_average"]
"""Where the importance ratio is taken (`TrainConfig.importance_sampling_level`, ART's names)."""

ART_FIELD_NAMES = {"beta": "kl_beta", "kl_penalty_coef": "kl_beta"}
"""ART's names of `TrainConfig` fields: `art.TrainConfig(beta=...)` (ART before 2026) and `kl_penalty_coef` (since)."""
ART_FIELDS_WITHOUT_EFFECT = {"grad_accumulation_sequences": None, "optimizer_save_interval": 5}
"""Fields of ART's `TrainConfig` that set how a step is computed, not what it learns (sequences per gradient
accumulation; how often the optimizer state is saved: here at every step): accepted, with no effect."""
ART_KL_SOURCE = "current_learner"
"""The one `kl_penalty_source` of ART's that autorl computes: the KL of the policy being trained to the base model."""

ART_TRAIN_SETTINGS = (
    "importance_sampling_level", "max_negative_advantage_importance_sampling_weight", "mask_prob_ratio",
    "kimi_k2_tau", "truncated_importance_sampling", "advantage_balance",
    "num_trajectories_learning_rate_multiplier_power", "scale_learning_rate_by_reward_std_dev",
)  # fmt: skip
"""`TrainConfig` fields of ART's training settings, under ART's names and formulas (`autorl.dev.train_settings`)."""

LOSS_DEFAULTS: dict[str, dict[str, object]] = {
    "dr_grpo": {"scale_rewards": "none"},
    "gspo": {"epsilon": 3e-4, "epsilon_high": 4e-4},
    "cispo": {"epsilon": 1.0, "epsilon_high": 5.0},
}
"""Per loss, the values that the fields a caller leaves unset take instead of the field defaults."""


class TrainConfig(BaseModel):
    """Settings of one GRPO update (`model.train(groups, config=TrainConfig(...))`)."""

    model_config = ConfigDict(
        use_attribute_docstrings=True, allow_inf_nan=False, extra="forbid"
    )  # docstrings: CLI help

    learning_rate: float = Field(3e-4, gt=0)
    """AdamW learning rate of the LoRA weights. The default is the one the learning benchmark supports
    for the embedded model with a rank-8 LoRA (benchmarks/perf/learning.py; docs/what-training-buys.md);
    larger models usually want less."""
    loss: LossName = "grpo"
    """The policy objective, named as TRL names it. A, the advantage; r, the importance ratio
    pi / pi_old against the rollout logprobs; n_i, sequence i's trained-token count; N, the update's
    sequence count. Fields left unset take the loss's defaults (`LOSS_DEFAULTS`); ones set explicitly win.
    - grpo: per token -min(r A, clip(r, 1 - epsilon, 1 + epsilon_high) A), summed over the update's trained
      tokens and divided by their count (a token-level mean: no per-sequence length normalisation, unlike
      TRL's "grpo", which averages each sequence first).
    - dr_grpo (Dr. GRPO): grpo's token loss with unscaled advantages (scale_rewards defaults to "none"),
      divided by the constant N x max_i n_i (the longest sequence's trained tokens stand in for the
      maximum completion length, which multi-turn trajectories lack) instead of the token count.
    - dapo (DAPO): the token-level mean over the whole update with the decoupled clip (epsilon,
      epsilon_high). That is exactly what grpo computes here, defaults included, so the two are the same
      loss; the name is kept so that configurations written for TRL mean what they say. DAPO's overlong
      reward shaping is `overlong_buffer` (soft punishment) and `mask_truncated` (filtering), with any loss.
    - gspo (GSPO): one ratio per sequence, s_i = exp(mean over its trained tokens of log r), and per
      sequence -min(s_i A, clip(s_i, 1 - epsilon, 1 + epsilon_high) A), averaged over the N sequences.
      Its clip range is ~1000x narrower than grpo's: epsilon / epsilon_high default to 3e-4 / 4e-4.
    - cispo (CISPO, MiniMax-M1): per token -sg(clamp(r, 1 - epsilon, epsilon_high)) A log pi, a
      REINFORCE gradient weighted by the clamped ratio with no gradient through it (no token is dropped),
      divided by the token count. epsilon_high is the cap itself, as in TRL (not 1 + epsilon_high).
      Defaults epsilon 1.0 (no lower bound) and epsilon_high 5.0 (weights up to 5, TRL's recommended value).
    How autorl's conventions differ from TRL's (advantage scale, sequences without signal, the KL) is in
    `autorl.training.loss` and docs/training.md."""
    epsilon: float = Field(0.2, ge=0)
    """Lower clip range of the importance ratio (1 - epsilon). In grpo/dr_grpo/dapo/gspo, tokens whose
    ratio fell below it with a negative advantage stop contributing; in cispo the weight is floored there.
    Default 0.2; gspo 3e-4, cispo 1.0 (see `loss`)."""
    epsilon_high: float | None = Field(0.28, ge=0)
    """Upper clip range (1 + epsilon_high; for cispo the weight's cap itself, as in TRL); None uses `epsilon`.
    Default 0.28; gspo 4e-4, cispo 5.0."""
    scale_rewards: ScaleRewards = "group"
    """What divides the advantages (reward minus its group's mean): group, the group's reward standard
    deviation; batch, the standard deviation of every reward of the step (as TRL's "batch"); none,
    nothing (the default for dr_grpo). A standard deviation is the population's plus 1e-4, so near-tied
    groups get advantages near 0 (TRL: the sample's plus 1e-4, sqrt(G / (G - 1)) larger). True and False, as
    older configurations write it, mean group and none."""
    ppo_epochs: int = Field(1, ge=1)
    """Optimizer steps over the same batch of rollouts (PPO's epochs; TRL's num_iterations). Each pass is one
    step of the whole batch; from the second on, the policy has moved from the one that sampled, and the
    clip bounds how far each token's ratio may pull."""
    mask_truncated: bool = False
    """Completions cut by the rollout's max_tokens (finish_reason "length" in any turn) carry no gradient
    (DAPO's overlong filtering); their rewards still count in their group's mean and scale."""
    overlong_buffer: int = Field(0, ge=0)
    """DAPO's soft overlong punishment, in tokens (0: off): a trajectory whose longest policy turn runs into
    the last overlong_buffer tokens before max_completion_tokens loses reward linearly, 1 at the limit. The
    penalty joins the reward before the advantages are computed; the step's `reward` metric stays the
    judge's, and `overlong_penalty` is the step's mean penalty."""
    max_completion_tokens: int | None = Field(None, ge=1)
    """The turn length the overlong penalty counts up to; unset, `autorl run` uses the rollouts' max_tokens
    (--max-tokens). With `model.train(...)`, set it when overlong_buffer is on."""
    kl_beta: float = Field(0.0, ge=0)
    """Weight of a KL penalty to the reference policy (the base model, LoRA disabled: one extra forward
    pass without gradients on every step, no second copy of the weights). Per token, beta x k3 with k3 =
    exp(ref - logp) - (ref - logp) - 1 is added to the loss of every completion of the step, tied groups
    included (as in TRL), averaged over all their tokens (by the loss's normaliser over every completion).
    0: no penalty (and no `kl` metric); the base-model pass then runs only on the steps that measure the
    sentinel's figures (`TrainerConfig.drift_every`)."""
    tie_spread: float = Field(0.0, ge=0)
    """A group whose rewards lie less than this apart (highest minus lowest) counts as tied and is not
    trained, as a group of equal rewards is not: set it to the judge's noise floor, so that answers that
    differ only by the judge's noise teach nothing (scaled by their tiny std they would count in full).
    `autorl run` sets it to the judge audit's measured noise; 0: only equal rewards tie."""
    turn_advantage_weight: float = Field(1.0, ge=0)
    """Credit per turn (GiGPO's step-advantage weight omega): where a judge scored turns (a trajectory's
    `metadata["turn_rewards"]`, one reward per assistant message: `ruler.TurnScores`), each turn's tokens get
    A = A_episode + omega x A_step, A_step comparing the turn's discounted return with those of the group's turns
    from the same state (`autorl.training.turn_credit`; docs/training.md). Without turn rewards nothing changes;
    0: trajectory-level advantages even where turns were scored."""
    turn_advantage_grouping: TurnGrouping = "auto"
    """Which turns a turn's return is compared with: state, those of the group answered from the same
    conversation so far (GiGPO's anchor states; a turn from a state no other rollout reached gets no step
    advantage); turn, those with the same turn number (per-turn group normalisation); auto, the same state where
    another rollout reached it, else the same turn number among the turns whose state is their own."""
    turn_reward_discount: float = Field(0.95, ge=0, le=1)
    """gamma of a turn's return, r_t + gamma x r_t+1 + gamma^2 x r_t+2 + ... (GiGPO's 0.95): how much of the
    later turns' rewards a turn is credited with."""
    importance_sampling_correction: bool = False
    """Correct for tokens sampled by an older policy than the one being trained (truncated importance
    sampling, as TRL's and prime-rl's asynchronous trainers do): the ratio r and its clip are taken against
    the trainer's own logprobs of the policy before this update (pi_old), and each token's policy term is
    multiplied by min(pi_old / pi_behaviour, importance_sampling_cap), without gradient, pi_behaviour being
    the logprob the inference server reported when it sampled the token (1 where unknown). Off: r is taken
    against pi_behaviour itself, as a synchronous step wants. `autorl.PipelineTrainer` (`autorl run --async
    N`, N > 0) turns it on unless it is set; it adds the step metrics `is_weight_mean` and
    `is_truncated_fraction`."""
    importance_sampling_cap: float | None = Field(2.0, gt=0)
    """The truncation bound C of the importance weights of `importance_sampling_correction`: a token's
    weight is at most C, which bounds the variance a very stale or very unlikely token can add (TRL's
    `vllm_importance_sampling_cap`). None: no weights, only the ratio against pi_old (ART's
    `precalculate_logprobs` without `truncated_importance_sampling`)."""
    importance_sampling_level: RatioLevel | None = None
    """Where the importance ratio r is taken (ART's setting): token, pi / pi_old per token; sequence,
    exp(mean over the sequence's trained tokens of log(pi / pi_old)) for every token of it; average, the mean
    of the two; geometric_average, the square root of their product. The loss's objective and normaliser stay
    (gspo's per-sequence mean among them). None: the loss's own (sequence for gspo, token for the others)."""
    max_negative_advantage_importance_sampling_weight: float | None = Field(None, gt=0)
    """ART's cap of the importance ratio, as ART computes it: r is clamped to at most this before the clip and
    the objective, at every token (whatever its advantage's sign, despite the name). None: no cap."""
    mask_prob_ratio: bool = False
    """ART's ratio masking: a token whose r lies outside the open clip range (1 - epsilon, 1 + epsilon_high;
    for cispo (1 - epsilon, epsilon_high)) gets r = 0 (no gradient through it) before the objective."""
    kimi_k2_tau: float | None = None
    """Kimi K2's (and ART's) per-token advantage correction: A - tau x sg(log(pi / pi_old)) per token, which
    pulls tokens the policy already moved towards back. None: off."""
    truncated_importance_sampling: float | None = Field(None, gt=0)
    """ART's truncated importance sampling without its `precalculate_logprobs`: each token's policy term is
    multiplied by sg(min(r, C)) with C this value, r the ratio after the settings above. With
    `importance_sampling_correction` set `importance_sampling_cap` instead (ART's pairing of the two maps
    onto that). None: off."""
    advantage_balance: float = Field(0.0, ge=-1, le=1)
    """ART's weighting of negative against positive advantages, in [-1, 1]: above 0 the negative advantages
    are multiplied by 1 - balance (1: only positive ones train), below 0 the positive ones by 1 + balance
    (-1: only negative ones). 0: balanced."""
    num_trajectories_learning_rate_multiplier_power: float = 0.0
    """ART's learning-rate scaling by batch size: the update's learning rate is learning_rate x n ** power, n
    the trajectory histories (sequences) the update trains. 0: learning_rate as given."""
    scale_learning_rate_by_reward_std_dev: bool = False
    """ART's learning-rate scaling by the trend of the reward spread (as ART's LocalBackend computed it before
    ART 0.5 left it without effect): a line fitted to the history's per-step `reward_std_dev` (the mean of
    the groups' population reward std), the learning rate x (its value at the last step / its intercept)
    when the intercept is positive; 1 with fewer than 2 steps of history."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradients are clipped to this global norm."""
    micro_batch_size: int = Field(8, ge=1)
    """Sequences per forward/backward pass; gradients accumulate over one optimizer step. 8 holds a typical
    group, whose shared prompt then runs once (`TrainerConfig.share_prompt_prefix`), which makes the update
    faster than smaller micro-batches (`benchmarks/perf/perf_grpo_step.py`, its trainer ablation). Lower it
    when activations do not fit: memory grows with sequences x length (long answers at 8 can exhaust a CPU
    machine's memory; `TrainerConfig.gradient_checkpointing` keeps about one layer's activations instead of
    every layer's: `benchmarks/perf/perf_trainer_memory.py` measures both at 8 long completions)."""

    @model_validator(mode="before")
    @classmethod
    def _art_names(cls, data: object) -> object:
        """ART's field names (`ART_FIELD_NAMES`) set autorl's fields; its fields without effect here are dropped;
        any other unknown name is an error naming it (never silently dropped)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for art_name, field in ART_FIELD_NAMES.items():
            if art_name in data:
                value = data.pop(art_name)
                if field in data and data[field] != value:
                    raise ValueError(f"{art_name}={value!r} and {field}={data[field]!r} set the same field")
                data[field] = value
        for name in ART_FIELDS_WITHOUT_EFFECT:
            data.pop(name, None)
        source = data.pop("kl_penalty_source", ART_KL_SOURCE)
        if source != ART_KL_SOURCE:
            raise ValueError(f"kl_penalty_source={source!r}: autorl's KL penalty is the policy's to the base model "
                             f"({ART_KL_SOURCE!r})")  # fmt: skip
        return data

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _boolean_scale(cls, value: object) -> object:
        return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _loss_defaults(self) -> TrainConfig:
        for name, value in LOSS_DEFAULTS.get(self.loss, {}).items():
            if name not in self.model_fields_set:
                setattr(self, name, value)
        if self.importance_sampling_correction and self.truncated_importance_sampling is not None:
            raise ValueError("truncated_importance_sampling is the weight cap without importance_sampling_correction;"
                             " with it, set importance_sampling_cap")  # fmt: skip
        return self


class TrainerConfig(BaseModel):
    """How a model's LoRA is built and trained; fixed for the life of a model."""

    model_config = ConfigDict(use_attribute_docstrings=True, allow_inf_nan=False)  # field docstrings are CLI help

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
    with bf16 support, or a CPU with avx512_bf16 or amx_bf16, where updates are faster than in float32:
    `benchmarks/perf/perf_grpo_step.py`), else float32. The LoRA weights and their optimizer state stay
    float32 either way."""
    seed: int = 0
    """Seed of the LoRA initialisation."""
    engine: Literal["auto", "peft", "unsloth"] = "auto"
    """What loads and trains the LoRA (`autorl.training.engines`): peft (transformers + PEFT, CPU or GPU), unsloth
    (Unsloth's FastLanguageModel: fused kernels, its gradient checkpointing; a CUDA GPU), auto (unsloth
    on a CUDA machine where it is installed, else peft). Same loss, same PEFT checkpoints either way;
    unsloth runs each sequence whole (no `share_prompt_prefix`)."""
    share_prompt_prefix: bool = True
    """Run the context tokens that a micro-batch's sequences share (a group's prompt) through the model
    once, and continue every sequence from that KV cache, instead of once per sequence. Same loss and
    gradients up to float rounding; a group's sequences are then batched together. With LoRA dropout,
    the shared tokens share one dropout mask."""
    gradient_checkpointing: bool = False
    """Keep only each decoder layer's input for the backward and recompute the layer there (transformers'
    gradient checkpointing; peft engine, where unsloth has its own always): a micro-batch's activations
    shrink from every layer's to about one layer's, for one more forward pass per update. For long
    completions at large micro-batches, where the activations are what fills memory
    (`benchmarks/perf/perf_trainer_memory.py`). Same loss and gradients up to float rounding; prompts are
    then not shared (`share_prompt_prefix`: a recomputed layer has no KV cache to continue from)."""
    logprob_chunk_tokens: int = Field(1024, ge=0)
    """The trainer scores a micro-batch's tokens from the model's last hidden states, applying the output
    head to this many positions at a time (`autorl.training.loss.head_logprobs`): memory holds one chunk's
    logits, never the whole micro-batch's [sequences x tokens x vocabulary] in float32, which at long
    completions is gigabytes. Same logprobs, entropies and gradients up to float rounding. 0: the whole
    micro-batch's logits at once (the plain way; `benchmarks/perf/perf_trainer_memory.py` compares the two).
    Data-parallel training (`ClusterConfig.trainer_workers` > 1) computes whole logits: its forward goes
    through DDP's wrapper, which returns logits."""
    drift_every: int = Field(3, ge=0)
    """How often a step measures the reward-hacking sentinel's figures (`base_logprob`, `kl_to_base` in its
    metrics: every rollout of the step scored under the base weights, a forward without gradients): at step 1
    and every this many steps after (1, 1 + k, 1 + 2k, ...); steps between have no such figures. With
    `TrainConfig.kl_beta` > 0 that pass is the KL penalty's reference and runs every step, so every step
    has them. The default 3 is the sentinel's window (`pipelines.sentinel.RISE_STEPS`: it averages the
    figures of a run's last 3 steps), which then holds one measured step; replayed on the learning
    benchmark's runs it flags the same gaming runs (`benchmarks/perf/sentinel_calibration.py`,
    `at_defaults_measured_every`). 1: every step; 0: never (the sentinel then has nothing to judge)."""
    eager_attention_max_tokens: int = Field(128, ge=0)
    """On CPU, a micro-batch up to this many tokens wide runs transformers' eager attention instead of
    SDPA, whose CPU backward is the slower one on short sequences; wider ones, and every one on a GPU, run
    the model's own attention (eager holds each layer's attention weights for the backward: memory and time
    that grow with the square of the width). 0: never eager. Same loss up to float rounding; peft engine
    only. The limit is where eager still gains on the hosts measured: `benchmarks/perf/perf_trainer_attention.py`
    measures a step eager against SDPA by width (its figures: docs/results.md)."""
