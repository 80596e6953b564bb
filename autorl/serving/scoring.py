"""Scoring given tokens with a served model: each token's logprob given the ones before it.

vLLM computes them in a prefill (its `prompt_logprobs` sampling parameter on a completion of the tokens,
one new token long), on the engine and weights that sampled the rollouts: the evaluate stage scores its
answers this way under the base model (`pipelines.policy.Policy.base_logprobs`), which needs no second
copy of the weights beside the trainer's, and whose numbers are the sampler's own.
"""

from __future__ import annotations

import logging

from openai import AsyncOpenAI, OpenAIError

log = logging.getLogger("autorl")


async def prompt_logprobs(client: AsyncOpenAI, model: str, token_ids: list[int]) -> list[float | None] | None:
    """The logprob under `model` of each of `token_ids` given the ones before it (None for the first), or
    None when the server cannot score them (logged: too long for its context, or no `prompt_logprobs`)."""
    try:
        response = await client.completions.create(
            model=model, prompt=token_ids, max_tokens=1, temperature=0.0, extra_body={"prompt_logprobs": 0}
        )
    except OpenAIError as exc:
        log.warning("could not score %d tokens with %s: %s", len(token_ids), model, str(exc).splitlines()[0][:200])
        return None
    entries = (response.choices[0].model_extra or {}).get("prompt_logprobs")
    if not entries or len(entries) != len(token_ids):
        log.warning("the server of %s returned no prompt_logprobs for %d tokens", model, len(token_ids))
        return None
    return [
        None if entry is None or str(token) not in entry else float(entry[str(token)]["logprob"])
        for token, entry in zip(token_ids, entries, strict=True)
    ]
