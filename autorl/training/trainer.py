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
from ..trajectories import Trajectory, TrajectoryGroup, truncated
from ..types import TrainSFTConfig
from .art_knobs import RatioShaping, balanced, learning_rate_multiplier, reward_spreads, reward_std_dev
from .checkpoints import METRICS_FILE, checkpoint_name, latest_checkpoint
from .data_parallel import DataParallel, Share, share, synced
from .drift import drift_totals, figures_from_totals
from .engines import DEFAULT_MAX_SEQ_LENGTH, LOADERS, check_sequence_lengths, resolve_engine, training_dtype
from .forwards import PolicyForwards
from .loss import advantages, clipped_policy_loss, kl_weight, loss_normaliser, overlong_penalty
from .sequences import Sequence, tokenize_trajectory
from .turn_credit import credit_turns, micro_batch_advantages

OPTIMIZER_FILE = "optimizer.pt"
HISTORY_FILE = "history.jsonl"
"""The run's history beside its `checkpoints/` (the backend writes it: `autorl.backends.run_dir`)."""
log = logging.getLogger(__name__)


def release_freed_memory() -> None:
    """Give the memory that the process has freed back to the OS (glibc's malloc_trim; elsewhere nothing):
    a step's activations, gigabytes on CPU, would otherwise stay with the process while the vLLM server
    and the next stages need the RAM; on CUDA, the GPU memory torch's allocator keeps cached too."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # the blocks torch's allocator caches count as used on the GPU: a vLLM server (re)started after a
        # step checks that its share is free, and would find the trainer's cache holding it
        torch.cuda.empty_cache()


def measures_drift(every: int, step: int | None) -> bool:
    """Whether step number `step` (1 the first; None: unknown) measures the sentinel's figures under
    `TrainerConfig.drift_every` = `every`: steps 1, 1 + every, 1 + 2 x every, ...; every step where the number
    is unknown; none with `every` 0."""
    return every > 0 and (step is None or (step - 1) % every == 0)


def longest_turn(trajectory: Trajectory) -> int:
    """The completion tokens of the trajectory's longest policy turn (its sampled tokens' logprobs)."""
    items = trajectory.messages_and_choices
    return max((len(i.logprobs.content or []) for i in items if isinstance(i, Choice) and i.logprobs), default=0)


class GRPOTrainer(PolicyForwards):
    """Holds the policy (base model + LoRA) and its optimizer; `step()` applies one GRPO update.

    With `parallel` it is one rank of a data-parallel trainer (`autorl.training.data_parallel`): it joins the
    process group, trains its share of each step's sequences under DDP, and returns the whole step's metrics,
    the same on every rank; the caller saves on rank 0 only. Its forward passes are `PolicyForwards`'."""

    def __init__(
        self,
        model_dir: Path,
        checkpoints: Path,
        config: TrainerConfig,
        device: str | None = None,
        parallel: DataParallel | None = None,
        max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
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
        self.max_seq_length = max_seq_length  # the server's max_model_len: Unsloth cuts longer sequences
        checkpoint = latest[1] if latest else None
        self.model = LOADERS[self.engine](model_dir, checkpoint, config, self.dtype, self.device, max_seq_length)
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
        per_group = advantages(shaped, config.scale_rewards, config.tie_spread)
        per_group = [a if a is None else balanced(a, config.advantage_balance) for a in per_group]
        sampled: list[Sequence] = []  # every rollout's policy tokens, tied groups included: the sentinel's
        for group, group_advantages in zip(groups, per_group, strict=True):
            # a trajectory's conversation, then its additional histories (ART's): each a sequence of its advantage
            sequences = [
                [tokenize_trajectory(c, self.tokenizer) for c in (t, *t.additional_histories)]
                for t in group.trajectories
            ]
            sampled += [s for own in sequences for s in own if any(s.mask)]
            check_sequence_lengths([len(s.input_ids) for s in sampled], self.max_seq_length, self.engine)
            group_advantages = credit_turns(group, sequences, group_advantages, config)  # per turn, where scored
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
            "reward_std_dev": reward_std_dev(groups),
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
            self._update(batch, mine, config, references, (step, metrics["reward_std_dev"]))
            if batch
            else {"loss": 0.0, "grad_norm": 0.0, "trained_tokens": 0}
        )
        metrics["step_time_s"] = time.monotonic() - started
        release_freed_memory()
        return metrics

    def sft_step(self, trajectories: list[Trajectory], config: TrainSFTConfig) -> dict[str, float]:
        """One supervised fine-tuning step (ART's `train_sft`): the trajectories in `config`'s batches, one AdamW
        step per batch at that batch's learning rate, each minimising the mean negative log-likelihood of the
        batch's assistant tokens (`config.assistant_turns`; system, user and tool tokens are context). Gradients
        are clipped as `TrainConfig.max_grad_norm`'s default; micro-batches as its `micro_batch_size`'s."""
        started = time.monotonic()
        defaults = TrainConfig()
        sequences = [tokenize_trajectory(t, self.tokenizer, config.assistant_turns) for t in trajectories]
        check_sequence_lengths([len(s.input_ids) for s in sequences], self.max_seq_length, self.engine)
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

    def _update(
        self,
        batch: list[tuple[Sequence, float]],
        mine: Share,
        config: TrainConfig,
        base: dict[int, torch.Tensor],
        reward_spread: tuple[int | None, float] = (None, 0.0),
    ) -> dict[str, float]:
        """`config.ppo_epochs` optimizer steps on (sequence, advantage) pairs under `config.loss`; returns
        their metrics. This process trains `mine` of the `batch` (all of it with one trainer); the normalisers
        and the metrics are the whole batch's. `base` holds the base-model logprobs of `mine`'s sequences
        (`_base_logprobs`, by `id`): the KL penalty's reference. The learning rate is `config`'s times
        `learning_rate_multiplier` (ART's scalings: by the sequences trained, and by the trend of the history's
        `reward_std_dev` with `reward_spread`, this step's (number, value), at its end). The policy term is normalised over the
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
        history = self.checkpoints.parent / HISTORY_FILE
        spreads = reward_spreads(history, reward_spread) if config.scale_learning_rate_by_reward_std_dev else []
        rate = config.learning_rate * learning_rate_multiplier(config, len(batch), spreads)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        total_tokens = sum(sum(s.mask) for s, _ in batch)
        signal = [sum(s.mask) for s, a in batch if a != 0]
        normaliser = loss_normaliser(config.loss, signal or [sum(s.mask) for s, _ in batch])
        kl_beta = kl_weight(config.loss, config.kl_beta, signal, [sum(s.mask) for s, _ in batch])
        epsilon_high = config.epsilon if config.epsilon_high is None else config.epsilon_high
        shaping = RatioShaping.of(config)
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
                advantage = micro_batch_advantages(micro, input_ids.shape[1], self.device)
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
                    loss=config.loss, ref_logprobs=reference, kl_beta=kl_beta, shaping=shaping, **correction,
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
            "learning_rate": rate,
            "sampler_logprob_gap": sums["sampler_gap_sum"] / known if known else float("nan"),
        }
        if config.kl_beta > 0:
            metrics["kl"] = sums["kl_sum"] / tokens
        if config.importance_sampling_correction:
            metrics["is_weight_mean"] = sums["is_weight_sum"] / tokens
            metrics["is_truncated_fraction"] = sums["is_truncated_tokens"] / tokens
        return metrics

    def save(self, step: int, metrics: dict[str, float]) -> Path:
        """Write `checkpoints/NNNN/` (PEFT adapter, optimizer state, metrics) atomically."""
        target = self.checkpoints / checkpoint_name(step)
        with atomic_dir(target) as tmp:  # replaces an incomplete checkpoint left by a killed run
            self.model.save_pretrained(tmp)
            torch.save(self.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
            (tmp / METRICS_FILE).write_text(json.dumps({"step": step, **metrics}))
        return target
