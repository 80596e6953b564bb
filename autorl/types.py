"""ART's `art.types`: the type aliases rollout code annotates conversations with (`art.Messages`,
`art.MessagesAndChoices`, `art.Tools`), the configs of a training call (`TrainConfig`, `TrainSFTConfig`) and
what `backend.train` returns (`TrainResult`).

The aliases are annotations only: `Trajectory` itself takes any dict message and any OpenAI `Choice`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict, field_validator

from .config import TrainConfig
from .errors import AutoRLError

__all__ = [
    "Choice", "LocalTrainResult", "Message", "MessageOrChoice", "Messages", "MessagesAndChoices",
    "ServerlessTrainResult", "Tools", "TrainConfig", "TrainResult", "TrainSFTConfig",
]  # fmt: skip

Message = ChatCompletionMessageParam
"""One chat message as the OpenAI API takes it (a dict with `role` and `content`, ...)."""
MessageOrChoice = Message | Choice
"""An item of `Trajectory.messages_and_choices`: a message (context) or a `Choice` the policy sampled."""
Messages = list[Message]
"""A conversation, as `messages=` of a chat completion request."""
MessagesAndChoices = list[MessageOrChoice]
"""A rollout's conversation with the policy's `Choice`s in place of its replies (what GRPO trains on)."""
Tools = list[ChatCompletionToolParam]
"""Tool definitions, as `tools=` of a chat completion request."""


@dataclass
class TrainResult:
    """What `backend.train(model, groups, ...)` and `backend.train_sft(...)` return (ART's `TrainResult`, with
    `LocalTrainResult`'s `checkpoint_path`, on every backend)."""

    step: int
    """The model's step after the call: the checkpoint it wrote."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The step's metrics (loss, gradient norm, reward, ...; as `history.jsonl` records them), without `step`.
    Log them with `await model.log(metrics=result.metrics, step=result.step)`."""
    checkpoint_path: str | None = None
    """The checkpoint's directory on this machine (a PEFT LoRA); None where it is not here (a `RemoteBackend`
    without `mirror=`)."""


LocalTrainResult = TrainResult
"""ART's name for `LocalBackend.train`'s result; autorl's backends all return a `TrainResult`."""
ServerlessTrainResult = TrainResult
"""ART's name for `ServerlessBackend.train`'s result: autorl's `ServerlessBackend` (a `RemoteBackend`) returns a
`TrainResult`, whose `checkpoint_path` (with `mirror=`) stands for ART's W&B `artifact_name`."""


class TrainSFTConfig(BaseModel):
    """Settings of one supervised step (`model.train_sft(trajectories, config)`), with ART's fields."""

    model_config = ConfigDict(use_attribute_docstrings=True, allow_inf_nan=False, extra="forbid")

    learning_rate: float | list[float] = 5e-5
    """AdamW learning rate of the LoRA weights: one for every batch, or a list with one per batch (a schedule,
    as `autorl.utils.sft.create_sft_dataset_iterator` makes; its length is then the number of batches)."""
    batch_size: int | Literal["auto"] = "auto"
    """Trajectories per optimizer step. auto: all of them in as many batches as `learning_rate` lists (one
    batch with a single rate)."""
    assistant_turns: Literal["all", "last"] = "all"
    """Which assistant turns of each trajectory are trained: all of them, or only the last; every other token
    (system, user, tool results) is context."""

    @field_validator("learning_rate")
    @classmethod
    def _not_negative(cls, value: float | list[float]) -> float | list[float]:
        if any(rate < 0 for rate in (value if isinstance(value, list) else [value])):
            raise ValueError("a learning rate cannot be negative")  # 0: a schedule's last batch, a step that stays
        return value

    @field_validator("batch_size")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be at least 1")
        return value

    def rates(self, count: int) -> list[tuple[list[int], float]]:
        """The batches of `count` trajectories, as their indices, each with its learning rate; one clear error
        when a list of rates does not match the batches."""
        listed = self.learning_rate if isinstance(self.learning_rate, list) else None
        if self.batch_size == "auto":
            batches = len(listed) if listed else 1
            size = max(1, -(-count // batches))
        else:
            size = self.batch_size
        starts = range(0, count, size)
        if listed is not None and len(listed) != len(starts):
            raise AutoRLError(
                f"TrainSFTConfig: {len(listed)} learning rates for {len(starts)} batches of {size} "
                f"({count} trajectories); give one rate per batch"
            )
        rates = listed or [float(self.learning_rate)] * len(starts)  # type: ignore[arg-type]
        return [(list(range(start, min(start + size, count))), rate) for start, rate in zip(starts, rates, strict=True)]
