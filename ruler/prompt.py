"""The judge prompt: input checks, identical-trajectory dedup, the shared-prefix layout, and fitting.

RULER sends a group to the judge in one request. The system message states the user's task (when
known) and the rubric, outside the trajectories. Trajectories that are identical are sent once. The
longest message prefix that all trajectories share (system prompt, input, early turns) is sent once as
`<context>`; each trajectory contributes only its remainder, under a short id the judge answers with.

When the prompt must fit a token budget (a judge with a small context), the longest message contents
are shortened first, deterministically, with a visible marker (see `build_judge_prompt`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.chat.chat_completion import Choice

from .errors import RulerInputError
from .messages import Message, as_message
from .scores import EXPLANATION_MAX_CHARS

SYSTEM_TEMPLATE = """\
You judge {count} trajectories of an AI agent. All of them were given the same task; they differ in what the \
agent did. Compare them with each other and give each a score from 0 to 1 following the rubric. The scores are \
used relative to each other, so rank with care.

{task_section}Rubric:
{rubric}

The user message holds the tools the agent could call (<tools>), the conversation all trajectories share \
(<context>), and each trajectory's own continuation (<trajectory id="...">). Messages are JSON, one per line.\
{shortened_note}

Answer with a JSON object {{"scores": {{"<id>": {{{entry}}}}}}} that has exactly one entry for each trajectory \
id: {ids}."""

EXPLAINED_ENTRY = '"explanation": "<one short sentence, at most {max_chars} characters>", "score": <0 to 1>'
"""What the judge writes for each trajectory when asked to explain its scores."""
SCORE_ENTRY = '"score": <0 to 1>'
"""What the judge writes for each trajectory when asked for scores alone (`RulerJudge.explain` false)."""

TASK_SECTION = """\
The task the agent was built for, as its user described it (the trajectories show the agent's own system \
prompt, which may state it less well):
<task>
{task}
</task>

"""

SHORTENED_NOTE = """ \
To fit the judge's context, long message texts were shortened: "…[shortened N chars]…" marks where N \
characters were cut. Judge what remains; the cut itself is no fault of the agent."""

MIN_KEPT_CHARS = 64
"""Fitting never shortens a message text below this many characters (plus the marker)."""
MESSAGE_OVERHEAD_TOKENS = 8
"""Tokens the judge's chat template adds around each message, in the estimate."""


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
        plain = [as_message(m) for m in messages]
        if not all(isinstance(m, dict) and "role" in m for m in plain):
            raise RulerInputError(f"trajectory {number} holds an item that is not a chat message dict with a 'role'")
        if not any(m["role"] == "assistant" for m in plain):
            raise RulerInputError(
                f"trajectory {number} has no assistant message; the judge scores what the agent did, so each "
                "trajectory needs at least one"
            )
        lists.append(plain)
    return lists


def estimate_tokens(text: str) -> int:
    """A cheap, deterministic, conservative token count: the text's UTF-8 bytes / 3, rounded up.

    BPE tokenizers average about 4 characters a token on English and JSON, and about one token per
    CJK character (3 bytes), so this over-counts rather than under-counts; no tokenizer is loaded.
    """
    return -(-len(text.encode()) // 3)


def estimate_prompt_tokens(messages: Sequence[Message]) -> int:
    """`estimate_tokens` over a chat's message texts, plus the chat template's overhead per message."""
    return sum(estimate_tokens(str(m.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` of its characters, head (2/3) and tail (1/3), around `…[shortened N chars]…`.

    A text at most 40 characters over the limit is left as it is (the marker would save nothing).
    """
    if len(text) <= limit + 40:
        return text
    head = limit * 2 // 3
    return f"{text[:head]}…[shortened {len(text) - limit} chars]…{text[len(text) - (limit - head) :]}"


def _shorten_message(message: Message, limit: int | None) -> Message:
    """The message with its text (a string content, or the text parts of a list content) shortened."""
    content = message.get("content")
    if limit is None:
        return message
    if isinstance(content, str):
        short = shorten(content, limit)
        return message if short == content else {**message, "content": short}
    if isinstance(content, list):
        parts = [
            {**part, "text": shorten(part["text"], limit)}
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
        return message if parts == content else {**message, "content": parts}
    return message


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
    shortened: list[bool]
    """For each input trajectory, whether a message of it (shared context included) was shortened to fit."""
    estimated_tokens: int
    """The prompt's size by `estimate_prompt_tokens`."""


def _render(messages: Sequence[Message]) -> str:
    return "\n".join(json.dumps(m, ensure_ascii=False, default=str) for m in messages)


def build_judge_prompt(
    message_lists: Sequence[Sequence[Message]],
    rubric: str,
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    task: str | None = None,
    max_prompt_tokens: int | None = None,
    explain: bool = True,
) -> JudgePrompt:
    """Lay out a group (checked plain messages) for one judge request; works for any group size.

    task: the user's task description, stated in the system message next to the rubric.
    explain: ask for a short explanation with each score (else for the scores alone).
    max_prompt_tokens: a budget for the prompt (by `estimate_prompt_tokens`); None: no fitting. Over
        budget, every message text longer than a limit L is shortened to L characters (see `shorten`),
        with L the largest value that fits: the longest texts are cut first, identical inputs always give
        the same prompt. The system message (task, rubric) and the tools are never shortened. Raises
        `RulerInputError` when even L = `MIN_KEPT_CHARS` does not fit.
    """
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

    def layout(limit: int | None) -> JudgePrompt:
        context = [_shorten_message(m, limit) for m in unique_lists[0][:prefix]]
        remainders = [[_shorten_message(m, limit) for m in messages[prefix:]] for messages in unique_lists]
        context_cut = context != list(unique_lists[0][:prefix])
        cut = {tid for tid, mine, old in zip(ids, remainders, unique_lists, strict=True) if mine != list(old[prefix:])}
        sections = []
        if tools:
            sections.append(f"<tools>\n{_render(tools)}\n</tools>")
        if prefix:
            sections.append(f"<context>\n{_render(context)}\n</context>")
        sections += [
            f'<trajectory id="{tid}">\n{_render(messages)}\n</trajectory>'
            for tid, messages in zip(ids, remainders, strict=True)
        ]
        system = SYSTEM_TEMPLATE.format(
            count=len(ids),
            task_section=TASK_SECTION.format(task=task.strip()) if task and task.strip() else "",
            rubric=rubric.strip(),
            shortened_note=SHORTENED_NOTE if context_cut or cut else "",
            entry=EXPLAINED_ENTRY.format(max_chars=EXPLANATION_MAX_CHARS) if explain else SCORE_ENTRY,
            ids=", ".join(ids),
        )
        chat = [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(sections)}]
        return JudgePrompt(
            messages=chat,
            ids=ids,
            id_of=id_of,
            prefix_length=prefix,
            shortened=[context_cut or tid in cut for tid in id_of],
            estimated_tokens=estimate_prompt_tokens(chat),
        )

    full = layout(None)
    if max_prompt_tokens is None or full.estimated_tokens <= max_prompt_tokens:
        return full
    floor = layout(MIN_KEPT_CHARS)
    if floor.estimated_tokens > max_prompt_tokens:
        raise RulerInputError(
            f"the judge prompt for {len(ids)} distinct trajectories needs about {floor.estimated_tokens} tokens even "
            f"with every message shortened to {MIN_KEPT_CHARS} characters, more than the {max(max_prompt_tokens, 0)} "
            "the judge's context leaves for it; use a judge with a larger context (JudgeModel.context_tokens), a "
            "shorter rubric or task, or smaller groups"
        )
    low, high = MIN_KEPT_CHARS, max(len(canonical_json(m)) for messages in unique_lists for m in messages)
    while low < high:  # the largest limit that fits: the estimate grows with the limit
        middle = (low + high + 1) // 2
        if layout(middle).estimated_tokens <= max_prompt_tokens:
            low = middle
        else:
            high = middle - 1
    return layout(low)
