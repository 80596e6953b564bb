"""Programmatic judges of the learning benchmark's tasks: `(messages) -> float` in [0, 1].

Each scores the last assistant message only, and densely: a small model's answers to a task differ in
these scores from the start, so a group carries signal. (All-or-nothing criteria that the embedded base
model never meets, such as "a JSON object with keys a and b" or "end with a fixed sentence", tied nearly
every group in our trials: GRPO has next to nothing to learn from.) A task file names its judge as
`benchmarks.perf.learning_tasks.judges:<function>`.
"""

from __future__ import annotations

import json
import re
from typing import Any

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
PUNCTUATION = set(".,;:!?\"'()[]{}-–—…*#")
SENTENCE_ENDS = re.compile(r"[.!?]+")


def answer(messages: list[dict[str, Any]]) -> str:
    """The text of the last assistant message ("" when there is none)."""
    replies = [m for m in messages if m.get("role") == "assistant"]
    return (replies[-1].get("content") or "").strip() if replies else ""


def one_word(messages: list[dict[str, Any]]) -> float:
    """1 / the number of words of the answer: 1 for exactly one word, 0 for none."""
    count = len(_WORD.findall(answer(messages)))
    return 1.0 / count if count else 0.0


def uppercase(messages: list[dict[str, Any]]) -> float:
    """The share of the answer's letters that are capitals (0 for an answer without letters)."""
    letters = [c for c in answer(messages) if c.isalpha()]
    return sum(c.isupper() for c in letters) / len(letters) if letters else 0.0


def no_punctuation(messages: list[dict[str, Any]]) -> float:
    """1 / (1 + the number of punctuation marks) for an answer with words; 0 for one without."""
    text = answer(messages)
    if not _WORD.search(text):
        return 0.0
    return 1.0 / (1 + sum(c in PUNCTUATION for c in text))


def exclaim(messages: list[dict[str, Any]]) -> float:
    """The share of the answer's sentence endings (runs of . ! ?) that contain an exclamation mark;
    an answer with words but no ending counts as one plain ending (0)."""
    ends = SENTENCE_ENDS.findall(answer(messages))
    return sum("!" in end for end in ends) / len(ends) if ends else 0.0


def json_keys(messages: list[dict[str, Any]]) -> float:
    """All or nothing: 1 when the whole answer is a JSON object with exactly the keys "a" and "b", else 0. The
    embedded base model never writes one: the learnability check's example of a task that cannot learn
    (not a task of learning.py)."""
    try:
        value = json.loads(answer(messages))
    except ValueError:
        return 0.0
    return float(isinstance(value, dict) and set(value) == {"a", "b"})


TOOL, TOOL_ARGUMENTS = "convert", ("value", "from_unit", "to_unit")
"""The tool of learning_tasks/tool_call.toml (pipelines/tasks/unit_tools.py:convert) and its arguments."""
CALL_PARTS = (
    re.compile(r"<tool_call>"),
    re.compile(r'"name"\s*:'),
    re.compile(r'"arguments"\s*:'),
    re.compile(rf'"{TOOL}"'),
    re.compile(rf'"(?:{"|".join(TOOL_ARGUMENTS)})"\s*:'),
)
"""What a written call of the tool is made of: the tag, the JSON keys, the tool's name, one of its arguments."""


def tool_call(messages: list[dict[str, Any]]) -> float:
    """How well the rollout used its tools: 1 when one of its calls was accepted (a tool it has, valid JSON
    arguments that fit the schema, and the tool answered: its result is not an `error:` text), 0.5 when it
    made calls but every one failed; without a call that was parsed, 0.08 for each part of a call its replies
    wrote as text (`CALL_PARTS`, up to 0.4). The embedded base model writes a parsed call about never, but
    parts of one now and then: the partial credit gives its groups something to rank."""
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    calls = [c for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    if any(not results.get(c.get("id"), "error:").startswith("error:") for c in calls):
        return 1.0
    if calls:
        return 0.5
    texts = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "assistant")
    return round(0.08 * sum(bool(part.search(texts)) for part in CALL_PARTS), 2)
