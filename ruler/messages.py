"""Chat messages as judges read them: plain dicts; an OpenAI `Choice` (what a policy returned) becomes its
assistant message."""

from __future__ import annotations

from typing import Any

from openai.types.chat.chat_completion import Choice

Message = dict[str, Any]


def as_message(item: Message | Choice) -> Message:
    """`item` as a plain chat message: a `Choice` turned into its assistant message (content and tool calls),
    anything else as it is."""
    if not isinstance(item, Choice):
        return item
    message: Message = {"role": "assistant", "content": item.message.content or ""}
    if item.message.tool_calls:
        message["tool_calls"] = [call.model_dump(exclude_none=True) for call in item.message.tool_calls]
    return message
