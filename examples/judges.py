"""Program judges of the example tasks `arithmetic.toml`, `capitals.toml`, `capitals_text.toml`: messages -> [0, 1].

Each reads the question from the user message, works out the right answer itself, and checks that the
reply gives it: the content, not the form. Each gives partial credit where an answer is nearly right, so
that a small model's answers to one question differ in score (what GRPO learns from).
`autorl run examples/arithmetic.toml --judge examples/judges.py:arithmetic` names one.
"""

from __future__ import annotations

import re
from typing import Any

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
SUM = re.compile(r"What is (\d+) \+ (\d+)\?")
COUNTRY = re.compile(r"capital of ([A-Z][\w ]+?)\?")
CAPITALS = {
    "France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Germany": "Berlin", "Japan": "Tokyo",
    "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Greece": "Athens", "Portugal": "Lisbon",
    "Canada": "Ottawa", "Australia": "Canberra", "Brazil": "Brasilia", "Argentina": "Buenos Aires",
    "Mexico": "Mexico City", "India": "New Delhi", "Kenya": "Nairobi", "Norway": "Oslo", "Sweden": "Stockholm",
    "Poland": "Warsaw", "Ireland": "Dublin", "Austria": "Vienna", "Turkey": "Ankara", "Peru": "Lima",
    "Chile": "Santiago", "Cuba": "Havana", "Thailand": "Bangkok", "Vietnam": "Hanoi", "Belgium": "Brussels",
    "Netherlands": "Amsterdam", "Denmark": "Copenhagen", "Finland": "Helsinki", "Hungary": "Budapest",
    "Iran": "Tehran", "Iraq": "Baghdad", "Colombia": "Bogota", "Nigeria": "Abuja", "Morocco": "Rabat",
    "Switzerland": "Bern", "Scotland": "Edinburgh",
}  # fmt: skip
"""The countries of `capitals.jsonl` and their capitals."""
ACCEPTED = {"New Delhi": ("delhi",), "Brasilia": ("brasília",), "Bogota": ("bogotá",), "Beijing": ("peking",)}
"""Other spellings that count as the capital."""
LONG_ANSWER_WORDS = 12
"""Over this many words, a right answer gets `LONG_ANSWER_SCORE`: the task asks for the city alone."""
LONG_ANSWER_SCORE = 0.7


def question(messages: list[dict[str, Any]]) -> str:
    """The text of the first user message ("" when there is none)."""
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def answer(messages: list[dict[str, Any]]) -> str:
    """The text of the last assistant message ("" when there is none)."""
    replies = [m for m in messages if m.get("role") == "assistant"]
    return str(replies[-1].get("content") or "").strip() if replies else ""


def arithmetic(messages: list[dict[str, Any]]) -> float:
    """1 when the reply's last number is the sum asked for; else, in a reply that names both numbers of the
    question, up to 0.5 for a last number close to the sum (0.5 at one off, falling to 0 at ten off); 0 without
    a number, or for a question that is no sum. (Closeness alone would pay a constant number on every question
    whose sum is near it.)"""
    asked = SUM.search(question(messages))
    numbers = NUMBER.findall(answer(messages).replace(",", ""))
    if asked is None or not numbers:
        return 0.0
    off = abs(float(numbers[-1]) - (int(asked.group(1)) + int(asked.group(2))))
    if off == 0:
        return 1.0
    named = {float(n) for n in numbers[:-1]}
    if not {float(asked.group(1)), float(asked.group(2))} <= named:
        return 0.0
    return round(max(0.0, 0.5 * (1 - (off - 1) / 9)), 4)


def capitals(messages: list[dict[str, Any]]) -> float:
    """1 when the reply names the asked country's capital (`CAPITALS`, or a spelling of `ACCEPTED`) and no other
    capital of the table, `LONG_ANSWER_SCORE` when it does so in more than `LONG_ANSWER_WORDS` words; 0.1 when
    it names the capital beside others (a list of guesses); else 0."""
    asked = COUNTRY.search(question(messages))
    if asked is None or asked.group(1) not in CAPITALS:
        return 0.0
    text = answer(messages).lower()
    right = CAPITALS[asked.group(1)]
    if not any(_names(text, name) for name in (right.lower(), *ACCEPTED.get(right, ()))):
        return 0.0
    others = [city for city in CAPITALS.values() if city != right and _names(text, city.lower())]
    if others:
        return 0.1
    return 1.0 if len(text.split()) <= LONG_ANSWER_WORDS else LONG_ANSWER_SCORE


def _names(text: str, name: str) -> bool:
    """Whether `text` (lower case) has `name` as whole words."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None
