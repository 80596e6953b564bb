"""ART's type aliases for rollout code (`art.Messages`, `art.MessagesAndChoices`, `art.Tools`): the OpenAI
message and tool types a conversation is annotated with. They are annotations only: `Trajectory` itself
takes any dict message and any OpenAI `Choice`."""

from __future__ import annotations

from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.chat.chat_completion import Choice

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
