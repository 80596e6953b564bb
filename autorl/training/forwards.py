"""The policy's forward passes for `GRPOTrainer` (`PolicyForwards`): sequences padded into tensors and
ordered for micro-batches, each token's logprob (and entropy) with a shared prompt prefix run once and the
output head in chunks, and the base model's logprobs with the LoRA off. Apart from `trainer` so the update
(what is trained, the loss, the optimizer) reads on its own."""

from __future__ import annotations

import math

import torch

from .loss import head_logprobs, token_logprobs
from .sequences import Sequence

MIN_SHARED_PREFIX = 16
"""Shared prefixes shorter than this (tokens) are not worth an extra forward pass."""


def _prompt(sequence: Sequence) -> list[int]:
    """The tokens before the first trained token."""
    return sequence.input_ids[: sequence.mask.index(1)]


def shared_prefix_length(input_ids: torch.Tensor, mask: torch.Tensor) -> int:
    """How many leading tokens every row shares, stopping before the last untrained one.

    The logits at position t score token t + 1, so a prefix of `split` tokens may only cover tokens
    whose successors (up to token `split`) are all untrained context.
    """
    same = (input_ids == input_ids[:1]).all(dim=0)
    common = int(same.long().cumprod(0).sum())
    first_trained = int(mask.float().argmax(dim=1).min())  # every row has a trained token
    return max(0, min(common, first_trained - 1))


class PolicyForwards:
    """The forward passes of a trainer's policy. `GRPOTrainer` sets what they read: `model` (PEFT, LoRA on),
    `tokenizer`, `device`, `config` (`TrainerConfig`), `engine`, `_share_prefix`, `_model_attention` and
    `_ddp` (the model under DDP, data-parallel only)."""

    def _order(self, sequence: Sequence) -> tuple:
        """Where a sequence goes in a batch sorted for micro-batches: a group's sequences side by side (a shared
        prompt runs once) when prompts are shared, else by length (less padding)."""
        return (_prompt(sequence), len(sequence.input_ids)) if self._share_prefix else (len(sequence.input_ids),)

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
        split = shared_prefix_length(input_ids, mask) if self._share_prefix else 0
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
