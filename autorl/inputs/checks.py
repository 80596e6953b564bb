"""Checks that reject junk a generator wrote: placeholder-like inputs and unusable system prompts.

A small model echoes its prompt instead of doing the task: it "writes" inputs such as `example 1`,
`new_input6`, `guidance` (the name of a prompt field) or a sentence of the task description, and
system prompts that are pages of noise. These checks are deliberately simple and explicit; each
returns why a text was rejected (a short reason) or None when it passes.

Inputs (`junk_reason`), checked in this order:
- **template echo**: the whole text is a template word with an optional number (`example 1`,
  `input 3`, `new_input6`, `sample`), a bracketed placeholder (`<input>`, `{input}`, `[query]`),
  DSPy's field markers (`[[ ## new_inputs ## ]]`), or has no letters or digits at all (`...`).
- **single identifier**: one token of letters, digits, `_` and `-` (`guidance`, `snake_case_words`,
  `camelCase`), trailing punctuation ignored.
- **too few words**: fewer than `MIN_INPUT_WORDS` (2) words (whitespace-separated tokens with a
  letter), or fewer than
  `MIN_INPUT_LETTERS` (4) letters. "Convert 5 km to miles" and "hey can u send the report" pass.
- **copy of the instructions**: the character-trigram Jaccard similarity (`autorl.inputs.dedup`) with the
  task description, the generator instructions or any other instruction text given (the system
  prompt, the generator's own instructions), or with any one sentence of them, is at least
  `INSTRUCTION_COPY_THRESHOLD` (0.7). A real input that merely uses the task's words scores lower:
  "Translate this short English sentence into French: I like cats." against "Translate short
  English sentences into French" is 0.61.

System prompts (`system_prompt_problem`):
- **length**: at least `SYSTEM_PROMPT_CHARS[0]` (20) characters and under `SYSTEM_PROMPT_CHARS[1]`
  (1500; the JSON schema caps the string there, so one that reaches it was cut off).
- **natural language**: at least `MIN_PROMPT_WORDS` (5) words (tokens with a letter); letters and
  spaces make up at least `MIN_PROMPT_LETTER_SHARE` (0.7) of the characters; not a JSON object or
  list, code or markup as a whole, and no DSPy field markers or `{{ }}` template slots.
- **no repetition loop**: with 12 or more words, distinct word trigrams are at least
  `MIN_DISTINCT_TRIGRAMS` (0.5) of all word trigrams.
- **related to the task**: shares at least one content word (4+ letters, not a common word, compared
  on its first 5 letters so "convert" matches "converting") with the task description.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..task import TaskSpec
from .dedup import jaccard, ngrams, normalize

MIN_INPUT_WORDS = 2
"""Fewest words (tokens with a letter) in an input."""
MIN_INPUT_LETTERS = 4
"""Fewest letters in an input."""
INSTRUCTION_COPY_THRESHOLD = 0.7
"""Trigram Jaccard similarity with an instruction text or sentence at or above which an input is a copy."""

SYSTEM_PROMPT_CHARS = (20, 1500)
"""A system prompt has at least the first and fewer than the second number of characters (the schema's cap)."""
MIN_PROMPT_WORDS = 5
"""Fewest words in a system prompt."""
MIN_PROMPT_LETTER_SHARE = 0.7
"""Least share of a system prompt's characters that are letters or whitespace."""
MIN_DISTINCT_TRIGRAMS = 0.5
"""Least share of distinct word trigrams in a system prompt of 12 or more words (below: a repetition loop)."""

_TEMPLATE_WORDS = r"example|input|sample|message|query|question|request|prompt|text|output|answer|item|email"
_TEMPLATE_ECHO = re.compile(rf"(new|user|sample|example)?[\s_-]*({_TEMPLATE_WORDS})s?[\s_#:-]*\d*", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"[<{\[]+\s*[\w\s.-]*\s*[>}\]]+")
_FIELD_MARKER = re.compile(r"\[\[\s*##")
_TEMPLATE_SLOT = re.compile(r"\{\{|\}\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][\w-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n\s*\n")
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
"""A run of letters (an apostrophe inside allowed): what content words are made of."""


def _words(text: str) -> list[str]:
    """The whitespace-separated tokens of `text` that contain a letter."""
    return [token for token in text.split() if any(char.isalpha() for char in token)]


_COMMON_WORDS = frozenset(
    [
        "that",
        "this",
        "with",
        "from",
        "your",
        "what",
        "when",
        "where",
        "which",
        "will",
        "would",
        "should",
        "could",
        "must",
        "have",
        "into",
        "each",
        "then",
        "than",
        "them",
        "they",
        "their",
        "there",
        "these",
        "those",
        "about",
        "only",
        "also",
        "very",
        "more",
        "most",
        "some",
        "such",
        "reply",
        "replies",
        "answer",
        "user",
        "users",
        "agent",
        "assistant",
        "task",
        "write",
        "text",
        "given",
        "make",
        "sure",
        "always",
        "never",
        "other",
    ]
)


def _instruction_pieces(texts: Iterable[str]) -> list[frozenset[str]]:
    """Trigram sets of each instruction text and of each of its sentences."""
    pieces: list[frozenset[str]] = []
    for text in texts:
        if text.strip():
            pieces.append(ngrams(text))
            pieces += [ngrams(sentence) for sentence in _SENTENCE_END.split(text) if normalize(sentence)]
    return pieces


def junk_reason(text: str, task: TaskSpec | None = None, instructions: Iterable[str] = ()) -> str | None:
    """Why `text` is no real input ("template echo", "single identifier", "too few words", "copy of the
    instructions"), or None when it passes. `task` gives the description and generator instructions an
    input must not copy; `instructions` adds other texts (the system prompt, the generator's prompt)."""
    stripped = text.strip()
    if (
        _TEMPLATE_ECHO.fullmatch(stripped.strip(".:#*- "))
        or _PLACEHOLDER.fullmatch(stripped)
        or _FIELD_MARKER.search(stripped)
        or not normalize(stripped).strip("_")
    ):
        return "template echo"
    if _IDENTIFIER.fullmatch(stripped.rstrip(".!?:;,")):
        return "single identifier"
    if len(_words(stripped)) < MIN_INPUT_WORDS or sum(char.isalpha() for char in stripped) < MIN_INPUT_LETTERS:
        return "too few words"
    texts = [task.description, task.generator_instructions] if task is not None else []
    grams, pieces = ngrams(stripped), _instruction_pieces([*texts, *instructions])
    if any(jaccard(grams, piece) >= INSTRUCTION_COPY_THRESHOLD for piece in pieces):
        return "copy of the instructions"
    return None


def _content_stems(text: str) -> set[str]:
    return {word[:5] for word in _WORD.findall(text.casefold()) if len(word) >= 4 and word not in _COMMON_WORDS}


def system_prompt_problem(prompt: str, task: TaskSpec) -> str | None:
    """Why a generated system prompt is unusable (a short reason naming the check), or None when it passes."""
    prompt = prompt.strip()
    low, high = SYSTEM_PROMPT_CHARS
    if len(prompt) < low:
        return f"too short ({len(prompt)} characters, fewer than {low})"
    if len(prompt) >= high:
        return f"cut off at {high} characters"
    words = _words(prompt)
    if len(words) < MIN_PROMPT_WORDS:
        return f"not natural language ({len(words)} words)"
    share = sum(char.isalpha() or char.isspace() for char in prompt) / len(prompt)
    if share < MIN_PROMPT_LETTER_SHARE:
        return f"not natural language (only {share:.0%} letters and spaces)"
    whole_markup = (prompt[0] + prompt[-1]) in ("{}", "[]", "<>") or prompt.startswith("```")
    if whole_markup or _FIELD_MARKER.search(prompt) or _TEMPLATE_SLOT.search(prompt):
        return "not natural language (JSON, code or template markup)"
    lowered = [word.casefold().strip(".,;:!?\"'") for word in words]
    trigrams = list(zip(lowered, lowered[1:], lowered[2:], strict=False))
    if len(lowered) >= 12 and len(set(trigrams)) / len(trigrams) < MIN_DISTINCT_TRIGRAMS:
        return f"a repetition loop ({len(set(trigrams))} distinct of {len(trigrams)} word trigrams)"
    task_stems = _content_stems(task.description)
    if task_stems and not task_stems & _content_stems(prompt):
        return "unrelated to the task (no content word of the task description)"
    return None
