"""Turn trajectories into training sequences: token ids, a mask of policy tokens, rollout logprobs.

The conversation is rendered with the tokenizer's chat template turn by turn. Everything is context
(mask 0) except the tokens of each `Choice` the policy sampled (mask 1); for supervised fine-tuning, the
assistant messages too (all of them, or the last: `TrainedTurns`). When the rollout asked for
logprobs from our vLLM server (which returns sampled tokens as ids), the trained tokens are exactly
the sampled ids, end-of-turn token included, with the policy's logprobs at sampling time; otherwise
the template's rendering of the reply is trained and its old logprobs are unknown (NaN; the trainer
then uses the current policy's, which makes the step on-policy). A choice sampled under a grammar
(`autorl.trajectories.CONSTRAINED_CHOICES`) trains its sampled ids with unknown old logprobs too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from openai.types.chat.chat_completion import Choice

from ..errors import AutoRLError, quoted
from ..trajectories import CONSTRAINED_CHOICES, Trajectory

TOKEN_ID_PREFIX = "token_id:"
TrainedTurns = Literal["sampled", "all", "last"]
"""What of a conversation is trained: sampled, the policy's `Choice`s (RL); all, every assistant turn, message or
`Choice` (SFT); last, the last assistant turn only (SFT)."""


@dataclass
class Sequence:
    """One trajectory as model input."""

    input_ids: list[int]
    mask: list[int]
    """1 where the token was sampled by the policy and is trained on."""
    logprobs: list[float]
    """Rollout logprob of each token (NaN where unknown or not trained)."""
    turns: list[int] = field(default_factory=list)
    """Of each token, the index among the conversation's assistant messages of the turn it belongs to (-1: context)."""
    advantages: list[float] | None = None
    """Each token's advantage where its turns have their own (credit per turn: `autorl.training.turn_credit`);
    None: the trajectory's advantage, the same for all its tokens."""


def sampled_tokens(choice: Choice) -> tuple[list[int], list[float]] | None:
    """The sampled token ids and their logprobs, if the server returned them as `token_id:N`."""
    content = choice.logprobs.content if choice.logprobs else None
    if not content or not all(t.token.startswith(TOKEN_ID_PREFIX) for t in content):
        return None
    texts = [t.token.removeprefix(TOKEN_ID_PREFIX) for t in content]
    if bad := next((text for text in texts if not text.isdigit() or len(text) > 9), None):
        raise AutoRLError(f"a sampled token is {TOKEN_ID_PREFIX}{quoted(bad)}; expected {TOKEN_ID_PREFIX}N")
    return [int(text) for text in texts], [t.logprob for t in content]


def tokenize_trajectory(trajectory: Trajectory | Any, tokenizer: Any, trained: TrainedTurns = "sampled") -> Sequence:
    """Render a conversation (a `Trajectory`, or anything with `messages_and_choices`, `messages()` and `tools`,
    as ART's `History`) with `tokenizer`'s chat template and mark the tokens `trained` names."""
    items = trajectory.messages_and_choices
    messages = trajectory.messages()
    tools = trajectory.tools
    constrained = set(getattr(trajectory, "metadata", {}).get(CONSTRAINED_CHOICES, ()))
    turns = [
        index
        for index, item in enumerate(items)
        if isinstance(item, Choice) or (trained != "sampled" and messages[index].get("role") == "assistant")
    ]
    if trained == "last":
        turns = turns[-1:]

    def render(upto: int, generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages[:upto], tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) if text else []

    seq = Sequence([], [], [])
    rendered = ""  # the text that seq.input_ids stands for

    def extend(ids: list[int], trained: bool, logprobs: list[float] | None = None, turn: int = -1) -> None:
        seq.input_ids += ids
        seq.mask += [int(trained)] * len(ids)
        seq.logprobs += logprobs if logprobs is not None else [math.nan] * len(ids)
        seq.turns += [turn] * len(ids)

    def extend_context(text: str) -> str:
        if not text.startswith(rendered):
            raise AutoRLError("the chat template does not render conversations prefix-consistently; cannot train on it")
        extend(encode(text[len(rendered) :]), trained=False)
        return text

    for index in turns:
        item = items[index]
        rendered = extend_context(render(index, generation_prompt=True))
        reply = render(index + 1, generation_prompt=False)[len(rendered) :]
        sampled = sampled_tokens(item) if isinstance(item, Choice) else None
        turn = sum(m.get("role") == "assistant" for m in messages[:index])
        if sampled is None:
            extend(encode(reply), trained=True, turn=turn)
            rendered += reply
            continue
        ids, logprobs = sampled
        if bad := next((i for i in ids if i >= len(tokenizer)), None):
            raise AutoRLError(f"sampled token id {bad} is outside the vocabulary of {len(tokenizer)} tokens")
        extend(ids, trained=True, logprobs=None if index in constrained else logprobs, turn=turn)
        sampled_text = tokenizer.decode(ids, skip_special_tokens=False)
        if reply.startswith(sampled_text):  # the template's text after the reply (e.g. a newline)
            rendered += sampled_text
        else:  # the template renders the reply differently (tool calls, stripped text): follow the template
            rendered += reply
    return seq
