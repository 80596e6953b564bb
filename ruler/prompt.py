"""The judge prompt: input checks, identical-trajectory dedup, and the shared-prefix layout.

RULER sends a group to the judge in one request. Trajectories that are identical are sent once. The
longest message prefix that all trajectories share (system prompt, task, early turns) is sent once as
`<context>`; each trajectory contributes only its remainder, under a short id the judge answers with.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.chat.chat_completion import Choice

from autorl.trajectories import choice_to_message

from .errors import RulerInputError

Message = dict[str, Any]

SYSTEM_TEMPLATE = """\
You judge {count} trajectories of an AI agent. All of them were given the same task; they differ in what the \
agent did. Compare them with each other and give each a score from 0 to 1 following the rubric. The scores are \
used relative to each other, so rank with care.

Rubric:
{rubric}

The user message holds the tools the agent could call (<tools>), the conversation all trajectories share \
(<context>), and each trajectory's own continuation (<trajectory id="...">). Messages are JSON, one per line.

Answer with a JSON object {{"scores": {{"<id>": {{"explanation": "<one short sentence>", "score": <0 to 1>}}}}}} \
that has exactly one entry for each trajectory id: {ids}."""


def as_message_lists(
    message_lists: Sequence[Sequence[Message | Choice]], *, min_trajectories: int
) -> list[list[Message]]:
    """Check a group's conversations and return them as plain chat messages (`Choice`s converted).

    Raises `RulerInputError` for fewer than `min_trajectories` conversations, a message that is not a
    chat message, or a conversation without an assistant message.
    """
    count = len(message_lists)
    if count == 0:
        raise RulerInputError("cannot score an empty group: it has no trajectories")
    if count < min_trajectories:
        raise RulerInputError(
            f"RULER ranks trajectories against each other and needs at least {min_trajectories} per group, got "
            f"{count}; sample more rollouts per input, or use a FunctionJudge for absolute scores"
        )
    lists = []
    for number, messages in enumerate(message_lists, start=1):
        plain = [choice_to_message(m) if isinstance(m, Choice) else m for m in messages]
        if not all(isinstance(m, dict) and "role" in m for m in plain):
            raise RulerInputError(f"trajectory {number} holds an item that is not a chat message dict with a 'role'")
        if not any(m["role"] == "assistant" for m in plain):
            raise RulerInputError(
                f"trajectory {number} has no assistant message; the judge scores what the agent did, so each "
                "trajectory needs at least one"
            )
        lists.append(plain)
    return lists


def canonical_json(value: Any) -> str:
    """A stable JSON text of `value` (sorted keys), used to compare messages and to hash prompts."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def common_prefix_length(message_lists: Sequence[Sequence[Message]]) -> int:
    """How many leading messages all lists share, leaving every list at least one message of its own."""
    shortest = min(len(messages) for messages in message_lists)
    length = 0
    while length < shortest - 1 and len({canonical_json(m[length]) for m in message_lists}) == 1:
        length += 1
    return length


@dataclass(frozen=True)
class JudgePrompt:
    """One judge request for a group, and how its answer maps back onto the group."""

    messages: list[Message]
    """The chat sent to the judge: the system instructions with the rubric, then the group."""
    ids: list[str]
    """The id of each distinct trajectory, in the order the prompt shows them."""
    id_of: list[str]
    """For each input trajectory, the id of its distinct copy (identical trajectories share one)."""
    prefix_length: int
    """How many leading messages were sent once as shared context."""


def _render(messages: Sequence[Message]) -> str:
    return "\n".join(json.dumps(m, ensure_ascii=False, default=str) for m in messages)


def build_judge_prompt(
    message_lists: Sequence[Sequence[Message]], rubric: str, tools: Sequence[dict[str, Any]] | None = None
) -> JudgePrompt:
    """Lay out a group (checked plain messages) for one judge request; works for any group size."""
    distinct: dict[str, str] = {}  # canonical conversation -> id
    unique_lists: list[Sequence[Message]] = []
    id_of = []
    for messages in message_lists:
        key = canonical_json(messages)
        if key not in distinct:
            distinct[key] = str(len(distinct) + 1)
            unique_lists.append(messages)
        id_of.append(distinct[key])
    ids = list(distinct.values())
    prefix = common_prefix_length(unique_lists)

    sections = []
    if tools:
        sections.append(f"<tools>\n{_render(tools)}\n</tools>")
    if prefix:
        sections.append(f"<context>\n{_render(unique_lists[0][:prefix])}\n</context>")
    sections += [
        f'<trajectory id="{tid}">\n{_render(messages[prefix:])}\n</trajectory>'
        for tid, messages in zip(ids, unique_lists, strict=True)
    ]
    system = SYSTEM_TEMPLATE.format(count=len(ids), rubric=rubric.strip(), ids=", ".join(ids))
    chat = [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(sections)}]
    return JudgePrompt(messages=chat, ids=ids, id_of=id_of, prefix_length=prefix)
