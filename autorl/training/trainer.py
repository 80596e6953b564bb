"""The PEFT/torch GRPO trainer: one optimizer step of a LoRA from groups of scored trajectories."""

from __future__ import annotations

import ctypes
import json
import logging
import math
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
from openai.types.chat.chat_completion import Choice
from transformers import AutoTokenizer

from ..atomic import atomic_dir
from ..config import TrainConfig, TrainerConfig
from ..errors import AutoRLError
from ..trajectories import Trajectory, TrajectoryGroup
from ..types import TrainSFTConfig
from .checkpoints import METRICS_FILE, checkpoint_name, latest_checkpoint
from .data_parallel import DataParallel, Share, share, synced
from .drift import drift_totals, figures_from_totals
from .engines import LOADERS, resolve_engine
from .loss import (
    advantages,
    clipped_policy_loss,
    head_logprobs,
    kl_weight,
    loss_normaliser,
    overlong_penalty,
    token_logprobs,
)
from .sequences import Sequence, tokenize_trajectory

OPTIMIZER_FILE = "optimizer.pt"
log = logging.getLogger(__name__)


MIN_SHARED_PREFIX = 16
"""Shared prefixes shorter than this (tokens) are not worth an extra forward pass."""


BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags under which bf16 matmuls run natively (and beat fp32) in torch's CPU kernels."""


def training_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype of the frozen base weights for `TrainerConfig.dtype` on `device` ("auto" resolved)."""
    if dtype != "auto":
        return getattr(torch, dtype)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if device.type == "cpu" and _cpu_flags() & set(BF16_CPU_FLAGS) else torch.float32


def _cpu_flags() -> set[str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux: no flags known, so float32
        return set()
    return {flag for line in lines if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def release_freed_memory() -> None:
    """Give the memory that the process has freed back to the OS (glibc's malloc_trim; elsewhere nothing):
    a step's activations, gigabytes on CPU, would otherwise stay with the process while the vLLM server
    and the next stages need the RAM."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def measures_drift(every: int, step: int | None) -> bool:
    """Whether step number `step` (1 the first; None: unknown) measures the sentinel's figures under
    `TrainerConfig.drift_every` = `every`: steps 1, 1 + every, 1 + 2 x every, ...; every step where the number
    is unknown; none with `every` 0."""
    return every > 0 and (step is None or (step - 1) % every == 0)


def truncated(trajectory: Trajectory) -> bool:
    """Whether any of the policy's turns was cut by max_tokens (finish_reason "length")."""
    return any(isinstance(item, Choice) and item.finish_reason == "length" for item in trajectory.messages_and_choices)


def longest_turn(trajectory: Trajectory) -> int:
    """The completion tokens of the trajectory's longest policy turn (its sampled tokens' logprobs)."""
    items = trajectory.messages_and_choices
    return max((len(i.logprobs.content or []) for i in items if isinstance(i, Choice) and i.logprobs), default=0)


def _prompt(sequence: Sequence) -> list[int]:
    """The tokens before the first trained token."""
    return sequence.input_ids[: sequence.mask.index(1)]


def _shared_prefix_length(input_ids: torch.Tensor, mask: torch.Tensor) -> int:
    """How many leading tokens every row shares, stopping before the last untrained one.

    The logits at position t score token t + 1, so a prefix of `split` tokens may only cover tokens
    whose successors (up to token `split`) are all untrained context.
    """
    same = (input_ids == input_ids[:1]).all(dim=0)
    common = int(same.long().cumprod(0).sum())
    first_trained = int(mask.float().argmax(dim=1).min())  # every row has a trained token
    return max(0, min(common, first_trained - 1))


class GRPOTrainer:
    """Holds the policy (base model + LoRA) and its optimizer; `step()` applies one GRPO update.

    With `parallel` it is one rank of a data-parallel trainer (`autorl.training.data_parallel`): it joins the
    process group, trains its share of each step's sequences under DDP, and returns the whole step's metrics,
    the same on every rank; the caller saves on rank 0 only."""

    def __init__(
        self,
        model_dir: Path,
        checkpoints: Path,
        config: TrainerConfig,
        device: str | None = None,
        parallel: DataParallel | None = None,
    ):
        self.config = config
        self.checkpoints = checkpoints
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch.manual_seed(config.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.dtype = training_dtype(config.dtype, self.device)
        self.engine = resolve_engine(config.engine)
        log.info("trainer engine: %s", self.engine)
        latest = latest_checkpoint(checkpoints)
        self.model = LOADERS[self.engine](model_dir, latest[1] if latest else None, config, self.dtype, self.device)
        self._keep_lora_fp32()
        # gradient checkpointing (Unsloth's always) recomputes each layer without a KV cache to continue from
        checkpointing = config.gradient_checkpointing and self.engine == "peft"
        self._share_prefix = config.share_prompt_prefix and self.engine == "peft" and not checkpointing
        if checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._model_attention = self.model.get_base_model().config._attn_implementation
        """The model's own attention (transformers' choice at load)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=TrainConfig().learning_rate, weight_decay=0.0)
        if latest is not None and (latest[1] / OPTIMIZER_FILE).is_file():
            self.optimizer.load_state_dict(torch.load(latest[1] / OPTIMIZER_FILE, map_location=self.device))
        self.parallel = parallel
        self._ddp: torch.nn.Module | None = None
        """The model under DDP, through which the training forwards run (data-parallel only)."""
        if parallel is not None:
            parallel.join(self.device)
            self._ddp = parallel.wrap(self.model, self.device)

    def _share(self, items: list, sequences: list[Sequence]) -> Share:
        """This rank's share of a step's items (all of them with one trainer), split by the token counts of
        their `sequences`."""
        return share(items, [len(s.input_ids) for s in sequences], self.parallel)

    def _summed(self, values: dict[str, float]) -> dict[str, float]:
        """Figures summed over the ranks (as they are with one trainer)."""
        return values if self.parallel is None else self.parallel.sum(values)

    def _keep_lora_fp32(self) -> None:
        """LoRA weights and their optimizer state stay fp32 even over a bf16 base."""
        for p in self.model.parameters():
            if p.requires_grad:
                p.data = p.data.float()

    def step(self, groups: list[TrajectoryGroup], config: TrainConfig, step: int | None = None) -> dict[str, float]:
        """One GRPO update (`config.ppo_epochs` optimizer steps) over every group that carries signal (with
        kl_beta > 0, over every completion: the tied ones pay the KL penalty alone);
        returns the step's metrics, with the sentinel's `base_logprob` and `kl_to_base` over every rollout
        of the step, tied groups included, before the update (`autorl.training.drift`), where step number
        `step` measures them (`measures_drift`; without a number, every step does)."""
        started = time.monotonic()
        rewards = [t.reward for g in groups for t in g.trajectories]
        batch: list[tuple[Sequence, float]] = []
        tied = masked = 0
        penalties = [[self._overlong_penalty(t, config) for t in g.trajectories] for g in groups]
        shaped = [
            [t.reward + p for t, p in zip(g.trajectories, ps, strict=True)]
            for g, ps in zip(groups, penalties, strict=True)
        ]
        per_group = advantages(shaped, config.scale_rewards)
        sampled: list[Sequence] = []  # every rollout's policy tokens, tied groups included: the sentinel's
        for group, group_advantages in zip(groups, per_group, strict=True):
            # a trajectory's conversation, then its additional histories (ART's): each a sequence of its advantage
            sequences = [
                [tokenize_trajectory(c, self.tokenizer) for c in (t, *t.additional_histories)]
                for t in group.trajectories
            ]
            sampled += [s for own in sequences for s in own if any(s.mask)]
            if group_advantages is None:
                tied += 1
                if not config.kl_beta:
                    continue
                group_advantages = [0.0] * len(sequences)  # only the KL penalty: every completion pays it
            for trajectory, own, advantage in zip(group.trajectories, sequences, group_advantages, strict=True):
                if config.mask_truncated and truncated(trajectory):
                    masked += 1
                    continue
                # no policy gradient at advantage 0: such a sequence is trained only for the KL penalty
                batch += [(s, advantage) for s in own if (advantage != 0 or config.kl_beta) and any(s.mask)]
        metrics: dict[str, float] = {
            "reward": statistics.fmean(rewards) if rewards else 0.0,
            "reward_std": statistics.pstdev(rewards) if rewards else 0.0,
            "groups": len(groups),
            "groups_trained": len(groups) - tied,
            "groups_skipped_tied": tied,
            "trajectories": len(rewards),
            "exceptions": sum(len(g.exceptions) for g in groups),
        }
        if config.mask_truncated:
            metrics["truncated_masked"] = masked
        if config.overlong_buffer:
            metrics["overlong_penalty"] = statistics.fmean(p for ps in penalties for p in ps) if rewards else 0.0
        mine = self._share(batch, [s for s, _ in batch])
        references: dict[int, torch.Tensor] = {}
        if config.kl_beta > 0 or measures_drift(self.config.drift_every, step):  # the same on every rank
            # the sentinel's sequences this rank scores: its share of the batch's, and a share of the others'
            trained_ids = {id(s) for s, _ in batch}
            scored = {id(s) for s, _ in mine.items} if mine.weight else set()
            untrained = [s for s in sampled if id(s) not in trained_ids]
            scored |= {id(s) for s in self._share(untrained, untrained).items}
            counted = [s for s in sampled if id(s) in scored]  # in the step's order
            extra = [] if mine.weight else [s for s, _ in mine.items]  # a reference for the idle rank's 0-weighted run
            base = self._base_logprobs(counted + extra, config.micro_batch_size)  # before the update: no-grad forwards
            totals = drift_totals(counted, [[math.nan, *b.tolist()] for b in base[: len(counted)]])
            metrics.update(figures_from_totals(self._summed(totals)))
            references = {id(s): b for s, b in zip(counted + extra, base, strict=True)}
        metrics.update(
            self._update(batch, mine, config, references)
            if batch
            else {"loss": 0.0, "grad_norm": 0.0, "trained_tokens": 0}
        )
        metrics["step_time_s"] = time.monotonic() - started
        release_freed_memory()
        return metrics

    def _order(self, sequence: Sequence) -> tuple:
        """Where a sequence goes in a batch sorted for micro-batches: a group's sequences side by side (a shared
        prompt runs once) when prompts are shared, else by length (less padding)."""
        return (_prompt(sequence), len(sequence.input_ids)) if self._share_prefix else (len(sequence.input_ids),)

    def sft_step(self, trajectories: list[Trajectory], config: TrainSFTConfig) -> dict[str, float]:
        """One supervised fine-tuning step (ART's `train_sft`): the trajectories in `config`'s batches, one AdamW
        step per batch at that batch's learning rate, each minimising the mean negative log-likelihood of the
        batch's assistant tokens (`config.assistant_turns`; system, user and tool tokens are context). Gradients
        are clipped as `TrainConfig.max_grad_norm`'s default; micro-batches as its `micro_batch_size`'s."""
        started = time.monotonic()
        defaults = TrainConfig()
        sequences = [tokenize_trajectory(t, self.tokenizer, config.assistant_turns) for t in trajectories]
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.model.train()
        losses, norms, rates, trained, tokens = [], [], [], 0, 0
        for indices, rate in config.rates(len(sequences)):
            batch = sorted((sequences[i] for i in indices if any(sequences[i].mask)), key=self._order)
            if not batch:
                continue
            count = sum(sum(s.mask) for s in batch)
            for group in self.optimizer.param_groups:
                group["lr"] = rate
            total = 0.0
            mine = self._share(batch, batch)  # all of it with one trainer; the normaliser is the whole batch's
            size = defaults.micro_batch_size
            for micro in synced(self._ddp, [mine.items[i : i + size] for i in range(0, len(mine.items), size)]):
                input_ids, attention, mask, _ = self._pad(micro)
                logprobs, _ = self._token_logprobs(input_ids, attention, mask, with_entropy=False)
                loss = -(logprobs * mask[:, 1:]).sum()
                (loss * mine.weight / count).backward()
                total += float(loss.detach()) * (1.0 if mine.weight else 0.0)
            total = self._summed({"loss": total})["loss"]
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, defaults.max_grad_norm)))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            losses.append(total / count)
            rates.append(rate)
            trained += count
            tokens += sum(len(s.input_ids) for s in batch)
        release_freed_memory()
        return {
            "sft": 1.0,
            "loss": statistics.fmean(losses) if losses else float("nan"),
            "grad_norm": statistics.fmean(norms) if norms else 0.0,
            "learning_rate": statistics.fmean(rates) if rates else 0.0,
            "batches": len(losses),
            "trajectories": len(trajectories),
            "trajectories_untrained": sum(not any(s.mask) for s in sequences),
            "trained_tokens": trained,
            "tokens": tokens,
            "step_time_s": time.monotonic() - started,
        }

    @staticmethod
    def _overlong_penalty(trajectory: Trajectory, config: TrainConfig) -> float:
        if not config.overlong_buffer:
            return 0.0
        if config.max_completion_tokens is None:
            raise AutoRLError("TrainConfig.overlong_buffer needs max_completion_tokens: the rollouts' max_tokens")
        return overlong_penalty(longest_turn(trajectory), config.max_completion_tokens, config.overlong_buffer)

    def _base_logprobs(self, sequences: list[Sequence], micro_batch_size: int) -> list[torch.Tensor]:
        """Each sequence's logprob of every token after its first under the base weights (the LoRA switched
        off; no gradient), [len - 1] on the trainer's device: the sentinel's figures and the KL penalty's
        reference, one forward per sequence and step."""
        order = sorted(range(len(sequences)), key=lambda i: self._order(sequences[i]))
        result: list[torch.Tensor | None] = [None] * len(sequences)
        with torch.inference_mode(), self.model.disable_adapter():
            for start in range(0, len(order), micro_batch_size):
                rows = order[start : start + micro_batch_size]
                input_ids, attention, mask, _ = self._pad([sequences[i] for i in rows])
                first = max(int(mask.float().argmax(dim=1).min()) - 1, 0)  # the first logits that score a policy token
                logprobs = self._token_logprobs(input_ids, attention, mask, with_entropy=False, first=first)[0]
                for row, i in enumerate(rows):
                    result[i] = logprobs[row, : len(sequences[i].input_ids) - 1].float()
        return [r.clone() for r in result]  # out of inference mode: the KL penalty's loss may use them

    def _update(
        self,
        batch: list[tuple[Sequence, float]],
        mine: Share,
        config: TrainConfig,
        base: dict[int, torch.Tensor],
    ) -> dict[str, float]:
        """`config.ppo_epochs` optimizer steps on (sequence, advantage) pairs under `config.loss`; returns
        their metrics. This process trains `mine` of the `batch` (all of it with one trainer); the normalisers
        and the metrics are the whole batch's. `base` holds the base-model logprobs of `mine`'s sequences
        (`_base_logprobs`, by `id`): the KL penalty's reference. The policy term is normalised over the
        sequences with an advantage, the KL term over every sequence of the batch (`kl_weight`: with
        kl_beta > 0, advantage-0 ones are in it).

        Per trained token, over all epochs: `clip_fraction` (the clip changed the objective; =
        `clip_fraction_low` + `clip_fraction_high`, the ratio under 1 - epsilon / over 1 + epsilon_high),
        `ratio_mean`, `entropy` (of the policy's next-token distribution, nats) and, only when kl_beta > 0,
        `kl` (mean k3 to the base model); with `importance_sampling_correction`, `is_weight_mean` (the truncated
        importance weight) and `is_truncated_fraction` (tokens whose weight hit the cap). `loss` and `grad_norm` are the epochs' means; `loss` is the
        optimised value, the summed loss over the loss's normaliser. `sampler_logprob_gap` is measured
        in the first epoch, before the policy moves.
        """
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = config.learning_rate
        total_tokens = sum(sum(s.mask) for s, _ in batch)
        signal = [sum(s.mask) for s, a in batch if a != 0]
        normaliser = loss_normaliser(config.loss, signal or [sum(s.mask) for s, _ in batch])
        kl_beta = kl_weight(config.loss, config.kl_beta, signal, [sum(s.mask) for s, _ in batch])
        epsilon_high = config.epsilon if config.epsilon_high is None else config.epsilon_high
        trained = sorted(mine.items, key=lambda item: self._order(item[0]))
        size = config.micro_batch_size
        micro_batches = [trained[i : i + size] for i in range(0, len(trained), size)]
        sums: defaultdict[str, float] = defaultdict(float)  # `clipped_policy_loss` stats over every epoch
        params = [p for p in self.model.parameters() if p.requires_grad]
        proximal: list[torch.Tensor] = []  # with the off-policy correction: each micro-batch's first-epoch logprobs
        counts = 1.0 if mine.weight else 0.0  # an idle rank's run adds nothing to the figures
        for epoch in range(config.ppo_epochs):
            for index, micro in enumerate(synced(self._ddp, micro_batches)):
                input_ids, attention, mask, old = self._pad([s for s, _ in micro])
                advantage = torch.tensor([a for _, a in micro], device=self.device)
                reference = None
                if config.kl_beta > 0:  # the same weights, LoRA switched off
                    reference = torch.zeros(input_ids.shape[0], input_ids.shape[1] - 1, device=self.device)
                    for row, (sequence, _) in enumerate(micro):
                        reference[row, : len(sequence.input_ids) - 1] = base[id(sequence)]
                logprobs, entropy = self._token_logprobs(input_ids, attention, mask)
                pi_old, correction = old[:, 1:], {}
                if config.importance_sampling_correction:  # pi_old: the policy before this update, the trainer's
                    if epoch == 0:
                        proximal.append(logprobs.detach())
                    pi_old = proximal[index]
                    correction = {
                        "behaviour_logprobs": old[:, 1:],
                        "importance_sampling_cap": config.importance_sampling_cap,
                    }
                loss, stats = clipped_policy_loss(
                    logprobs, pi_old, advantage, mask[:, 1:], config.epsilon, epsilon_high,
                    loss=config.loss, ref_logprobs=reference, kl_beta=kl_beta, **correction,
                )  # fmt: skip
                (loss * mine.weight / normaliser).backward()
                sums["loss"] += float(loss.detach()) * counts
                sums["entropy"] += float((entropy * mask[:, 1:]).sum()) * counts
                for key, value in stats.items():
                    if epoch == 0 or not key.startswith("sampler_"):
                        sums[key] += value * counts
            norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))  # the ranks' gradients agree
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            sums["grad_norm"] += norm
        norms = sums.pop("grad_norm")
        sums = defaultdict(float, self._summed(dict(sums)), grad_norm=norms)
        epochs, tokens = config.ppo_epochs, total_tokens * config.ppo_epochs
        known = sums["sampler_known_tokens"]
        metrics = {
            "loss": sums["loss"] / normaliser / epochs,
            "grad_norm": sums["grad_norm"] / epochs,
            "trained_tokens": total_tokens,
            "tokens": sum(len(s.input_ids) for s, _ in batch),
            "clip_fraction": sums["clipped_tokens"] / tokens,
            "clip_fraction_low": sums["clipped_low_tokens"] / tokens,
            "clip_fraction_high": sums["clipped_high_tokens"] / tokens,
            "ratio_mean": sums["ratio_sum"] / tokens,
            "entropy": sums["entropy"] / tokens,
            "sampler_logprob_gap": sums["sampler_gap_sum"] / known if known else float("nan"),
        }
        if config.kl_beta > 0:
            metrics["kl"] = sums["kl_sum"] / tokens
        if config.importance_sampling_correction:
            metrics["is_weight_mean"] = sums["is_weight_sum"] / tokens
            metrics["is_truncated_fraction"] = sums["is_truncated_tokens"] / tokens
        return metrics

    def _token_logprobs(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        mask: torch.Tensor,
        with_entropy: bool = True,
        first: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logprob of each token given the ones before it ([batch, tokens - 1]) and the entropy of each
        position's next-token distribution (no gradient; None without `with_entropy`), as `grpo.token_logprobs`.

        With `share_prompt_prefix`, the context tokens that every row of the micro-batch starts with
        run through the model once, and the rows continue from that KV cache (gradients flow back
        through it); positions inside the shared prefix score no trained token and get 0. With `first`,
        the logits (a vocabulary's worth of numbers per position) are only computed from position `first`
        on, and the positions before it get 0 too. With `TrainerConfig.logprob_chunk_tokens`, the decoder's
        last hidden states go through the output head that many positions at a time (`head_logprobs`); with
        0, the model's whole logits at once. The attention implementation follows the micro-batch's width
        (`_set_attention`).
        """
        self._set_attention(input_ids.shape[1])
        split = _shared_prefix_length(input_ids, mask) if self._share_prefix else 0
        # a training forward under DDP goes through its wrapper (the backward's gradient average needs it), whole
        # logits at once; the shared prefix's runs plain
        under_ddp = self._ddp is not None and torch.is_grad_enabled()
        chunk = 0 if under_ddp else self.config.logprob_chunk_tokens
        plain = self.model.get_base_model().get_decoder() if chunk else self.model
        cache = None
        if split < MIN_SHARED_PREFIX or input_ids.shape[0] < 2:
            split = 0
        else:
            cache = plain(input_ids=input_ids[:1, :split], use_cache=True).past_key_values
            cache.batch_repeat_interleave(input_ids.shape[0])
        offset = max(first, split)
        if chunk:  # the last hidden states, then the output head over `chunk` positions at a time
            hidden = plain(
                input_ids=input_ids[:, split:], attention_mask=attention, past_key_values=cache, use_cache=False
            )  # a given cache is continued all the same; none is made where there is none
            hidden = hidden.last_hidden_state[:, offset - split : -1]
            head = self.model.get_base_model().get_output_embeddings()
            logprobs, entropy = head_logprobs(hidden, head, input_ids[:, offset + 1 :], chunk, with_entropy)
        else:
            kept = {"logits_to_keep": torch.arange(offset - split, input_ids.shape[1] - split)} if first > split else {}
            model = self._ddp if under_ddp else self.model
            logits = model(
                input_ids=input_ids[:, split:], attention_mask=attention, past_key_values=cache, use_cache=False, **kept
            )
            logprobs, entropy = token_logprobs(logits.logits, input_ids[:, offset:], with_entropy)
        if not offset:
            return logprobs, entropy
        skipped = torch.zeros(input_ids.shape[0], offset, device=self.device)
        return torch.cat([skipped, logprobs], dim=1), None if entropy is None else torch.cat([skipped, entropy], dim=1)

    def _set_attention(self, width: int) -> None:
        """Eager attention for a micro-batch `width` tokens wide where `TrainerConfig.eager_attention_max_tokens`
        says so (peft engine, CPU), else the model's own."""
        short = width <= self.config.eager_attention_max_tokens  # 0: never
        wanted = "eager" if short and self.engine == "peft" and self.device.type == "cpu" else self._model_attention
        base = self.model.get_base_model()
        if wanted != base.config._attn_implementation:
            base.set_attn_implementation(wanted)

    def _pad(self, sequences: list[Sequence]) -> tuple[torch.Tensor, ...]:
        width = max(len(s.input_ids) for s in sequences)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

        def padded(values: list[int], fill: int) -> list[int]:
            return values + [fill] * (width - len(values))

        input_ids = torch.tensor([padded(s.input_ids, pad_id) for s in sequences], device=self.device)
        attention = torch.tensor([padded([1] * len(s.input_ids), 0) for s in sequences], device=self.device)
        mask = torch.tensor([padded(s.mask, 0) for s in sequences], device=self.device)
        old = torch.tensor([padded(s.logprobs, math.nan) for s in sequences], device=self.device)
        return input_ids, attention, mask, old

    def save(self, step: int, metrics: dict[str, float]) -> Path:
        """Write `checkpoints/NNNN/` (PEFT adapter, optimizer state, metrics) atomically."""
        target = self.checkpoints / checkpoint_name(step)
        with atomic_dir(target) as tmp:  # replaces an incomplete checkpoint left by a killed run
            self.model.save_pretrained(tmp)
            torch.save(self.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
            (tmp / METRICS_FILE).write_text(json.dumps({"step": step, **metrics}))
        return target
