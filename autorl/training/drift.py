"""How far a policy's samples lie from the base model: the figures of the reward-hacking sentinel.

A judge can be consistent and still be gamed: a policy can raise its reward by writing what no one would
(capitalised gibberish for a judge of capital letters). Two cheap signals need no second judge, only the
base model's logprobs of the tokens the policy sampled:

- `base_logprob`: their mean log-likelihood per token under the base weights (the LoRA off): how natural
  the answers are to the base model. Compared with the base model's own answers, a fall means the policy
  writes what the base model finds unlikely.
- `kl_to_base`: the mean per-token k3 estimate of KL(policy || base) on those samples,
  exp(b - p) - (b - p) - 1 with p the policy's logprob at sampling time and b the base's: how far the
  policy moved. Unbiased on the policy's own samples and never negative; a small numeric gap between the
  engine that sampled and the one that scores adds only its square (about 0.001 nats at the trainer's
  0.046 mean gap).

The trainer computes them per step (`GRPOTrainer.step`), the pipeline's evaluate stage on the validation
answers, both with `drift_figures`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seq

from .sequences import Sequence

MAX_LOG_RATIO = 50.0
"""A token's base - policy logprob is capped here in the KL estimate (exp of more overflows nothing yet, but one
such token would outweigh every other)."""


def drift_figures(sequences: Seq[Sequence], base_logprobs: Seq[Seq[float | None]]) -> dict[str, float]:
    """`base_logprob` and `kl_to_base` (nats per token) over the policy tokens (mask 1) of `sequences`, and
    `drift_tokens`, how many there were; empty when there were none.

    base_logprobs: per sequence, the base model's logprob of each token given the ones before it, aligned
    with `input_ids` (the first, and any unknown, None or NaN: such tokens are left out). The KL counts the
    tokens whose sampling logprob (`Sequence.logprobs`) is known.
    """
    return figures_from_totals(drift_totals(sequences, base_logprobs))


def drift_totals(sequences: Seq[Sequence], base_logprobs: Seq[Seq[float | None]]) -> dict[str, float]:
    """The sums `drift_figures` divides (base logprobs and their token count, k3 KLs and theirs): sums add up
    over parts of a step's sequences, so a data-parallel trainer's ranks can each score a share of them."""
    base_sum = kl_sum = 0.0
    base_tokens = kl_tokens = 0
    for sequence, scored in zip(sequences, base_logprobs, strict=True):
        for trained, sampled, base in zip(sequence.mask, sequence.logprobs, scored, strict=True):
            if not trained or base is None or math.isnan(base):
                continue
            base_sum += base
            base_tokens += 1
            if not math.isnan(sampled):
                delta = min(base - sampled, MAX_LOG_RATIO)
                kl_sum += math.exp(delta) - delta - 1
                kl_tokens += 1
    return {"base_sum": base_sum, "base_tokens": base_tokens, "kl_sum": kl_sum, "kl_tokens": kl_tokens}


def figures_from_totals(totals: dict[str, float]) -> dict[str, float]:
    """`drift_figures` from `drift_totals` (of one part, or summed over parts)."""
    if not totals["base_tokens"]:
        return {}
    figures = {"base_logprob": totals["base_sum"] / totals["base_tokens"], "drift_tokens": int(totals["base_tokens"])}
    if totals["kl_tokens"]:
        figures["kl_to_base"] = totals["kl_sum"] / totals["kl_tokens"]
    return figures
