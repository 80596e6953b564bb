"""Programmatic judges of the learning benchmark's tasks: `(messages) -> float` in [0, 1].

Two kinds. The content tasks' judges (`arithmetic`, `capitals`, `opposites`, `alphabetical`, `extract_json`,
`tictactoe`) work out the right answer from the question and check that the reply gives it; the first two
and the game are the examples' own (`examples/judges.py`, `examples/tictactoe.py`). The form-only judges
(`one_word`, `uppercase`, `no_punctuation`, `exclaim`) score the shape of a reply and nothing it says: they
are probes of reward hacking, on which a trained model reaches a top score with answers that say nothing
(docs/learning.md), and what the sentinel is calibrated against. The tool tasks' judges (`tool_call`,
`directory`) score the use of a tool: `directory` checks the answer against its tool's own truth; `email_search`
(the example's, two calls in a row) scores each turn too (`ruler.TurnScores`).

Each scores densely: a small model's answers to a task differ in these scores from the start, so a group
carries signal. (All-or-nothing criteria that the embedded base
model never meets, such as "a JSON object with keys a and b" or "end with a fixed sentence", tied nearly
every group in our trials: GRPO has next to nothing to learn from.) A task file names its judge as
`benchmarks.perf.learning_tasks.judges:<function>`.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from examples.email_search import score as email_search
from examples.judges import (
    ACCEPTED,
    CAPITALS,
    COUNTRY,
    LONG_ANSWER_SCORE,
    NUMBER,
    SUM,
    answer,
    arithmetic,
    capitals,
    question,
)  # fmt: skip
from examples.tictactoe import call_arguments, score_result
from examples.tictactoe import score as tictactoe

from . import offices
from .directory import EMPLOYEES, extension

# the examples' judges, named here as tasks of the benchmark
__all__ = ["arithmetic", "capitals", "email_search", "tictactoe"]

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
PUNCTUATION = set(".,;:!?\"'()[]{}-–—…*#")
SENTENCE_ENDS = re.compile(r"[.!?]+")


OPPOSITES = {
    "hot": ("cold",), "big": ("small", "little", "tiny"), "up": ("down",), "fast": ("slow",), "happy": ("sad", "unhappy"),
    "light": ("dark", "heavy"), "old": ("young", "new"), "open": ("closed", "shut", "close"), "rich": ("poor",),
    "early": ("late",), "hard": ("soft", "easy"), "wet": ("dry",), "full": ("empty",), "strong": ("weak",),
    "loud": ("quiet", "soft", "silent"), "long": ("short",), "high": ("low",), "left": ("right",), "day": ("night",),
    "good": ("bad", "evil"), "in": ("out",), "young": ("old",), "push": ("pull",), "clean": ("dirty",),
    "thick": ("thin",), "win": ("lose",), "buy": ("sell",), "first": ("last",), "near": ("far",), "black": ("white",),
    "true": ("false",), "heavy": ("light",), "empty": ("full",), "sweet": ("sour", "bitter", "salty"),
    "asleep": ("awake",), "inside": ("outside",), "always": ("never",), "north": ("south",), "front": ("back", "behind"),
    "before": ("after",),
}  # fmt: skip
"""The words of `opposites.jsonl` and the answers that count as their opposite."""
VOCABULARY = set(OPPOSITES) | {word for words in OPPOSITES.values() for word in words}
"""Every word of `OPPOSITES`: a reply naming several is a list of guesses."""
QUOTED = re.compile(r'"([^"]+)"')
ORDER = re.compile(r"alphabetical order:\s*(.+)$")
EXTRACT = {
    "name": re.compile(r"(?:Meet |colleague )?([A-Z][a-z]+ [A-Z][a-z]+)"),
    "age": re.compile(r"\b(\d{2})\b"),
    "city": re.compile(r"\b(?:in|to|from|the) ([A-Z][a-z]+)"),
}
"""Where the right values stand in an `extract_json.jsonl` text (after its colon)."""
JSON_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)


def opposites(messages: list[dict[str, Any]]) -> float:
    """1 when the reply's first word is an opposite of the asked word (`OPPOSITES`), 0.5 when one comes later in
    the reply (not the asked word's own sentence); 0 for a list of guesses (more than one word of the table
    besides the asked one) and else."""
    asked = QUOTED.search(question(messages))
    if asked is None or asked.group(1).lower() not in OPPOSITES:
        return 0.0
    right = OPPOSITES[asked.group(1).lower()]
    words = _WORD.findall(answer(messages).lower())
    if len({w for w in words if w in VOCABULARY} - {asked.group(1).lower()}) > 1:
        return 0.0
    if words and words[0] in right:
        return 1.0
    return 0.5 if any(word in right for word in words) else 0.0


def alphabetical(messages: list[dict[str, Any]]) -> float:
    """The asked words in alphabetical order: 1 when the reply lists exactly them in that order (separated by
    anything, nothing else beside), else half the share of positions in the reply's list of the asked words
    that hold the right word; 0 for the question's own order copied (right only by chance)."""
    asked = ORDER.search(question(messages))
    if asked is None:
        return 0.0
    given = [w.strip().lower() for w in asked.group(1).split(",")]
    want = sorted(given)
    words = _WORD.findall(answer(messages).lower())
    if words == want:
        return 1.0
    listed = [w for w in words if w in want][: len(want)]
    if listed == given:
        return 0.0
    return round(0.5 * sum(a == b for a, b in zip(listed, want, strict=False)) / len(want), 4)


def extract_json(messages: list[dict[str, Any]]) -> float:
    """0.1 for a JSON object in the reply (the first `{...}`) with one of the keys "name", "age" and "city", plus
    0.3 for each of them that holds the text's value (case-insensitive; the age as a number or a string)."""
    text = question(messages).split(":", 1)[-1]
    found = JSON_OBJECT.search(answer(messages))
    if found is None:
        return 0.0
    try:
        value = json.loads(found.group(0))
    except ValueError:
        return 0.0
    if not isinstance(value, dict) or not set(value) & set(EXTRACT):
        return 0.0
    score = 0.1
    for key, pattern in EXTRACT.items():
        right = pattern.search(text)
        if right is not None and str(value.get(key, "")).strip().lower() == right.group(1).lower():
            score += 0.3
    return round(score, 4)


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


DIRECTORY_TOOL = "lookup_extension"
"""The tool of learning_tasks/directory.toml (directory.py), the only place the extensions are found."""
NEARER_NAME = 0.2
"""The most a refused or mistaken call of the directory tool earns for a name near the asked one (below 0.5)."""
FOUR_DIGITS = re.compile(r"(?<!\d)\d{4}(?!\d)")


def directory(messages: list[dict[str, Any]]) -> float:
    """The asked employee's extension, which only the tool knows (`directory.extension`): 1 when the final reply
    states it and no other four-digit number; else 0.5 for a call of the tool with the asked name that it
    answered; 0.25 for a call of it with another name or arguments it refused, up to `NEARER_NAME` more the nearer
    its name is to the asked one (so that groups whose every answer calls the tool still differ, and the nearer
    name is reinforced); 0.1 for a reply that names the tool or calls another one (a call the agent loop could not
    read, or a misnamed tool); else 0."""
    asked = next((name for name in EMPLOYEES if name in question(messages)), None)
    if asked is None:
        return 0.0
    if FOUR_DIGITS.findall(answer(messages)) == [str(extension(asked))]:
        return 1.0
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    calls = [c for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    ours = [c for c in calls if c.get("function", {}).get("name") == DIRECTORY_TOOL]
    if any(f"extension {extension(asked)}" in results.get(c.get("id"), "") for c in ours):
        return 0.5
    if ours:
        return round(0.25 + NEARER_NAME * max(_name_likeness(c, asked) for c in ours), 4)
    texts = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "assistant")
    return 0.1 if calls or DIRECTORY_TOOL in texts or "<tool_call>" in texts else 0.0


def _name_likeness(call: dict[str, Any], asked: str) -> float:
    """How near a call's `name` argument is to the asked name, 0 to 1 (difflib's ratio, case aside; 0 for a call
    without a readable name)."""
    name = call_arguments(call).get("name")
    if not isinstance(name, str):
        return 0.0
    return difflib.SequenceMatcher(None, name.lower(), asked.lower()).ratio()


directory_mcp = directory
"""`directory_mcp.toml` (the same tool over MCP) is judged as `directory.toml`."""


def offices_mcp(messages: list[dict[str, Any]]) -> float:
    """`offices_mcp.toml` (two MCP tools in sequence, inputs from MCP•RL scenarios), against the tools' own truth
    (`offices.py`), with credit for each step of the chain taken, so that a base model's answers differ: 1 when
    the final reply gives the asked employee's office and no other (for a question that names no one of the
    staff, the offices `get_office` returned in the conversation); 0.5 for a `get_office` call that answered; 0.3
    for a `find_employee` call that answered; 0.1 for any other tool call; else 0."""
    calls = [c for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    answered = {
        c.get("function", {}).get("name") for c in calls if not results.get(c.get("id"), "error").startswith("error")
    }
    asked = next((name for name in offices.EMPLOYEES if name.casefold() in question(messages).casefold()), None)
    returned = {found for text in results.values() for found in offices.OFFICE.findall(text)}
    truth = {offices.office(asked)} if asked else returned
    if truth and set(offices.OFFICE.findall(answer(messages))) == truth:
        return 1.0
    return 0.5 if offices.GET in answered else 0.3 if offices.FIND in answered else 0.1 if calls else 0.0


tictactoe_text = tictactoe
"""`tictactoe_text.toml` (the example's game without its system prompt) is judged as the example."""
tictactoe_cell = tictactoe
"""`tictactoe_cell.toml` (the game from its text, with a tool that keeps the board) is judged as the example."""
tictactoe_cell_strict = score_result
"""`tictactoe_cell_strict.toml` (the same game) is judged on its result alone: a win 1, a draw 0.5, else 0."""
capitals_text = capitals
"""`examples/capitals_text.toml` (capitals.toml without its system prompt) is judged as `capitals.toml`."""

# The strict judges of the `<task>_strict` tasks: the task text alone (no system prompt, no worked example),
# judged on what the text asks for: full credit only for the answer alone; the right content inside more words
# is a nearer miss of that form the shorter it is (`WITHIN_SHORT`, `WITHIN_LONG`), so that a base model that
# answers in sentences has groups that differ, and training is pulled towards the asked form.
BARE = re.compile(r"^[\s\"'*`]*(.*?)[\s\"'*`.!]*$", re.DOTALL)
"""An answer without the quotes, emphasis and final stop around it."""
SHORT_WORDS = 8
"""A reply of at most this many words that holds the right answer, beside it, is a near miss."""
WITHIN_SHORT, WITHIN_LONG = 0.5, 0.2
"""The credit for the right answer inside a short reply, and inside a longer one."""


def bare(messages: list[dict[str, Any]]) -> str:
    """The answer without the quotes, emphasis and final stop around it."""
    found = BARE.match(answer(messages))
    return found.group(1) if found else ""


def within(messages: list[dict[str, Any]], holds_it: bool) -> float:
    """The credit of a reply that is not the answer alone: `WITHIN_SHORT` or `WITHIN_LONG` when it `holds_it`
    (the right answer, inside other words), by its length; else 0."""
    if not holds_it:
        return 0.0
    return WITHIN_SHORT if len(_WORD.findall(answer(messages))) <= SHORT_WORDS else WITHIN_LONG


def arithmetic_strict(messages: list[dict[str, Any]]) -> float:
    """The sum alone: 1 for a reply that is the asked sum and nothing else (another number alone 0: credit for a
    number near the sum would pay one constant number across every question whose sum is near it); the right sum
    as the last number of a longer reply `within`'s credit; else 0."""
    asked = SUM.search(question(messages))
    if asked is None:
        return 0.0
    right = int(asked.group(1)) + int(asked.group(2))
    reply = bare(messages).replace(",", "")
    if re.fullmatch(r"-?\d+(?:\.0+)?", reply):
        return 1.0 if int(float(reply)) == right else 0.0
    numbers = NUMBER.findall(reply)
    return within(messages, bool(numbers) and float(numbers[-1]) == right)


def capitals_strict(messages: list[dict[str, Any]]) -> float:
    """The city alone: 1 for a reply that is the asked country's capital (or a spelling of `ACCEPTED`) and
    nothing else, case aside; the capital named in a longer reply with no other capital `within`'s credit;
    else 0."""
    asked = COUNTRY.search(question(messages))
    if asked is None or asked.group(1) not in CAPITALS:
        return 0.0
    names = (CAPITALS[asked.group(1)].lower(), *ACCEPTED.get(CAPITALS[asked.group(1)], ()))
    if bare(messages).lower() in names:
        return 1.0
    return within(messages, capitals(messages) >= LONG_ANSWER_SCORE)  # named, and no other capital


def opposites_strict(messages: list[dict[str, Any]]) -> float:
    """The word alone: 1 for a reply that is one opposite of the asked word (`OPPOSITES`), case aside; an
    opposite named in a longer reply that lists no other guesses `within`'s credit; else 0."""
    asked = QUOTED.search(question(messages))
    if asked is None or asked.group(1).lower() not in OPPOSITES:
        return 0.0
    if bare(messages).lower() in OPPOSITES[asked.group(1).lower()]:
        return 1.0
    return within(messages, opposites(messages) > 0)


def alphabetical_strict(messages: list[dict[str, Any]]) -> float:
    """The list alone: 1 for a reply that is the asked words in alphabetical order, separated by commas or
    spaces and nothing else; 0.2 x the share of positions right for the asked words alone in another order (0
    for the question's order copied); the sorted list inside a longer reply `within`'s credit; else 0."""
    asked = ORDER.search(question(messages))
    if asked is None:
        return 0.0
    given = [w.strip().lower() for w in asked.group(1).split(",")]
    want = sorted(given)
    words = [w for w in re.split(r"[\s,]+", bare(messages).lower()) if w]
    if words == want:
        return 1.0
    if sorted(words) == want:
        return (
            0.0 if words == given else round(0.2 * sum(a == b for a, b in zip(words, want, strict=True)) / len(want), 4)
        )
    found = _WORD.findall(answer(messages).lower())
    return within(messages, any(found[i : i + len(want)] == want for i in range(len(found))))


def extract_json_strict(messages: list[dict[str, Any]]) -> float:
    """The JSON object alone (a code fence around it allowed): 0.3 for each of "name", "age" and "city" that
    holds the text's value, and 1 when all three do; an object inside prose scores half that; 0 for no object."""
    reply = re.sub(r"^```(?:json)?\s*|\s*```$", "", answer(messages))
    try:
        value, factor = json.loads(reply), 1.0
    except ValueError:
        found = JSON_OBJECT.search(reply)
        try:
            value, factor = (json.loads(found.group(0)) if found else None), 0.5
        except ValueError:
            return 0.0
    if not isinstance(value, dict):
        return 0.0
    text = question(messages).split(":", 1)[-1]
    right = 0
    for key, pattern in EXTRACT.items():
        found = pattern.search(text)
        right += found is not None and str(value.get(key, "")).strip().lower() == found.group(1).lower()
    return round(factor * (1.0 if right == len(EXTRACT) else 0.3 * right), 4)


# The judges of the `<task>_described` tasks: a one-line description and nothing else, the inputs written by the
# run's generator. Its questions come in any wording, so each judge reads what a question asks (two numbers; one
# country it knows) and scores the reply as the strict judge scores that question in the benchmark's own wording;
# a question it cannot read (three numbers, no known country) scores 0 for every reply.
def _as_asked(messages: list[dict[str, Any]], asked: str | None) -> list[dict[str, Any]]:
    """`messages` with the question replaced by `asked` (None: no question a judge can read)."""
    if asked is None:
        return [m for m in messages if m.get("role") != "user"]
    first = next(i for i, m in enumerate(messages) if m.get("role") == "user")
    return [*messages[:first], {"role": "user", "content": asked}, *messages[first + 1 :]]


def arithmetic_described(messages: list[dict[str, Any]]) -> float:
    """`arithmetic_strict` for a question holding exactly two whole numbers, in any wording."""
    numbers = re.findall(r"(?<![\d.])\d+(?![\d.]*\d)", question(messages))
    return arithmetic_strict(
        _as_asked(messages, f"What is {numbers[0]} + {numbers[1]}?" if len(numbers) == 2 else None)
    )


def capitals_described(messages: list[dict[str, Any]]) -> float:
    """`capitals_strict` for a question that names exactly one country the judge knows, in any wording."""
    named = [country for country in CAPITALS if re.search(rf"\b{re.escape(country)}\b", question(messages))]
    return capitals_strict(_as_asked(messages, f"What is the capital of {named[0]}?" if len(named) == 1 else None))
