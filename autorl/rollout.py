"""Rollouts: the policy answers an input through its OpenAI-compatible client."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI
from pydantic import BaseModel, ConfigDict, Field

from .trajectories import Trajectory


class RolloutConfig(BaseModel):
    """Sampling settings of the policy during rollouts."""

    model_config = ConfigDict(use_attribute_docstrings=True)  # field docstrings are CLI help

    max_tokens: int = Field(128, ge=1)
    """Completion token cap per policy turn."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature; GRPO needs diverse answers within a group, so keep it near 1."""


async def single_turn_rollout(
    client: AsyncOpenAI,
    model_name: str,
    system_prompt: str,
    user_input: str,
    config: RolloutConfig,
    metadata: dict[str, Any] | None = None,
) -> Trajectory:
    """One answer of the policy to `user_input`, with the sampled tokens' logprobs for training."""
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_input}]
    response = await client.chat.completions.create(
        model=model_name,
        messages=messages,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        logprobs=True,
    )
    choice = response.choices[0]
    usage = response.usage
    return Trajectory(
        messages_and_choices=[*messages, choice],
        metadata=metadata or {},
        metrics={"completion_tokens": usage.completion_tokens if usage else 0, "truncated": choice.finish_reason == "length"},
    )
