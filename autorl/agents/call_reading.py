"""A model turn's tool calls as the agent loop runs them: those the server's parser read, and those it missed
that name one tool unambiguously.

vLLM's `hermes` parser reads `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks; a single block it
cannot read (broken JSON, a missing key) and it returns the whole turn as text, with no call at all. A small
model writes calls in many near misses of that form. `read_calls` accepts those that are unambiguous:

- a call object (`{"name": ..., "arguments": {...}}`, or "parameters" for "arguments") in a `<tool_call>` block the
  server could not read, or in the prose, a code fence or after other blocks; a block missing its last one or
  two closing braces;
- a tool name that differs from exactly one of the tools' in case, `-`, spaces or a close misspelling
  (`difflib` ratio at least `NAME_CUTOFF`), never one close to two tools;
- arguments given as a JSON string that holds an object;
- several calls in one turn, each read on its own.

What looks like a call but is not one of these (a `<tool_call>` block that is not a call object, a call object
naming no tool, or two, a Python-style call `tool(...)`) is counted invalid and left as text: no call runs. A
call the server read is run as read once its name is resolved (an unknown name gets the toolbox's error text).
Argument values are never changed beyond decoding them: that they fit the tool's schema is the toolbox's check.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

NAME_CUTOFF = 0.8
"""How close (difflib's ratio, 0-1) a misspelled tool name must be to one tool's name to be read as it."""
BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|$)", re.DOTALL)
"""A Hermes call block, closed or running to the next block or the end of the turn (vLLM's parser reads one
left open at the end; one left open before another is read up to it, so the next block is read too)."""
ARGUMENT_KEYS = ("arguments", "parameters", "args")
CALL_COUNTS = ("tool_calls_parsed", "tool_calls_recovered", "tool_calls_invalid")
"""What `TurnCalls.counts` counts: a rollout's metrics of that name sum them over its turns."""
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ReadCall:
    """One call to run: its id (the server's, or None for a call autorl read), tool, JSON arguments, where it was
    read (`server`, or from the text: `block`, a `<tool_call>` block the server could not read, or `prose`, a
    call object elsewhere) and what autorl repaired (`repairs`: `name`, a tool name resolved; `string_arguments`,
    arguments decoded from a JSON string). A call the server read that names no one tool is run as read, for
    the toolbox's error text (`known` False)."""

    id: str | None
    name: str
    arguments: str
    where: str = "server"
    repairs: tuple[str, ...] = ()
    known: bool = True

    @property
    def recovered(self) -> bool:
        """Read from the text or repaired by autorl: a call the server's parser alone would have lost."""
        return self.known and (self.where != "server" or bool(self.repairs))


@dataclass
class TurnCalls:
    """The calls of one model turn to run, the turn's text without the calls autorl read from it (`content`),
    and why each attempted call that is not run was not (`invalid`)."""

    calls: list[ReadCall]
    content: str | None
    invalid: list[str] = field(default_factory=list)

    @property
    def recovered(self) -> bool:
        """Whether autorl read or repaired a call (the turn's message must then show the calls as run)."""
        return any(call.recovered for call in self.calls)

    def counts(self) -> dict[str, int]:
        """`tool_calls_parsed` (read by the server and run as is), `tool_calls_recovered` (read or repaired by
        autorl, then run) and `tool_calls_invalid` (attempted and not run, or naming no tool)."""
        recovered = sum(call.recovered for call in self.calls)
        parsed = sum(call.known for call in self.calls) - recovered
        unknown = sum(not call.known for call in self.calls)
        return dict(zip(CALL_COUNTS, (parsed, recovered, len(self.invalid) + unknown), strict=True))


def summed_counts(metrics: Iterable[dict[str, Any]]) -> dict[str, int]:
    """`CALL_COUNTS` summed over rollouts' metrics (a training step's: the history records them); empty when
    no rollout counted calls (a task without tools)."""
    totals: dict[str, int] = {}
    for one in metrics:
        for name in CALL_COUNTS:
            if name in one:
                totals[name] = totals.get(name, 0) + int(one[name])
    return totals


def resolve_name(name: str, tools: Collection[str]) -> str | None:
    """The one tool `name` means: itself, else the only tool equal to it up to case, `-` and spaces, else the
    only tool within `NAME_CUTOFF` of it; None when it names none or is as close to two."""
    if name in tools:
        return name

    def key(text: str) -> str:
        return re.sub(r"[\s-]+", "_", text.strip()).casefold()

    by_key: dict[str, list[str]] = {}
    for tool in tools:
        by_key.setdefault(key(tool), []).append(tool)
    if len(same := by_key.get(key(name), [])) == 1:
        return same[0]
    keys = {k: named[0] for k, named in by_key.items() if len(named) == 1}  # two tools one key: neither guessed
    if same:
        return None
    close = difflib.get_close_matches(key(name), list(keys), n=2, cutoff=NAME_CUTOFF)
    return keys[close[0]] if len(close) == 1 else None


def read_calls(server_calls: list[tuple[str, str, str]], content: str | None, tools: Collection[str]) -> TurnCalls:
    """The calls of a turn to run, given the calls the server parsed ((id, name, JSON arguments), as
    `rollout.tool_calls` lists them), the turn's text and the names of the tools offered."""
    if server_calls:
        calls = []
        for call_id, name, arguments in server_calls:
            resolved = resolve_name(name, tools)
            fixed, repairs = _decoded_arguments(arguments)
            repairs += ("name",) if resolved not in (None, name) else ()
            calls.append(ReadCall(call_id, resolved or name, fixed, "server", repairs, resolved is not None))
        return TurnCalls(calls, content)
    return _calls_in_text(content or "", tools)


def _calls_in_text(text: str, tools: Collection[str]) -> TurnCalls:
    calls: list[ReadCall] = []
    invalid: list[str] = []
    spans: list[tuple[int, int]] = []  # where the calls read stand in the text

    def take(value: Any, where: str, span: tuple[int, int]) -> bool:
        """Read `value` as a call found at `where` ("block", "prose"); False when it is not a call object. An
        OpenAI `tool_calls` entry (`{"type": "function", "function": {...}}`) is read as the call it wraps."""
        if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict):
            value = value["function"]
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return False
        arguments = next((value[key] for key in ARGUMENT_KEYS if key in value), None)
        if arguments is None:
            return False
        resolved = resolve_name(value["name"], tools)
        if resolved is None:
            invalid.append(f"no one tool named {value['name']!r}")
            return True
        encoded, repairs = _decoded_arguments(json.dumps(arguments, ensure_ascii=False))
        calls.append(
            ReadCall(None, resolved, encoded, where, repairs + (("name",) if resolved != value["name"] else ()))
        )
        spans.append(span)
        return True

    blocks = list(BLOCK.finditer(text))
    for block in blocks:
        value = _object_in(block.group(1))
        if not take(value, "block", block.span()):
            invalid.append("a <tool_call> block that is not a call object")
    start = 0
    while (brace := text.find("{", start)) >= 0:
        if any(b.start() <= brace < b.end() for b in blocks):
            start = brace + 1
            continue
        try:
            value, end = _DECODER.raw_decode(text, brace)
        except ValueError:
            start = brace + 1
            continue
        take(value, "prose", (brace, end))
        start = end
    if not calls and not invalid and (python := _python_call(text, tools)):
        invalid.append(f"a Python-style call of {python!r}")
    if not calls:
        return TurnCalls([], text or None, invalid)
    kept = text
    for begin, end in sorted(spans, reverse=True):
        kept = kept[:begin] + kept[end:]
    kept = re.sub(r"```(?:json)?\s*```", "", kept).strip()
    return TurnCalls(calls, kept or None, invalid)


def _object_in(block: str) -> Any:
    """The JSON value at the start of a block's text (after any text before its first `{`), with one or two
    closing braces added where the block stops short of them; None when none is read."""
    brace = block.find("{")
    if brace < 0:
        return None
    body = block[brace:].rstrip()
    for tail in ("", "}", "}}"):
        try:
            return _DECODER.raw_decode(body + tail)[0]
        except ValueError:
            continue
    return None


def _decoded_arguments(arguments: str) -> tuple[str, tuple[str, ...]]:
    """The arguments as a JSON object text, and `("string_arguments",)` when they came as a JSON string holding
    one (else `()`: as given)."""
    try:
        value = json.loads(arguments)
        inner = json.loads(value) if isinstance(value, str) else None
    except (ValueError, TypeError):
        return arguments, ()
    return (
        (json.dumps(inner, ensure_ascii=False), ("string_arguments",)) if isinstance(inner, dict) else (arguments, ())
    )


def _python_call(text: str, tools: Collection[str]) -> str | None:
    """The first tool the text calls as Python (`tool(...)`, the parenthesis right after the name: "play (as X)"
    in prose is no call), if any."""
    found = re.search(r"\b(" + "|".join(map(re.escape, tools)) + r")\(", text) if tools else None
    return found.group(1) if found else None
