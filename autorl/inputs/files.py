"""The inputs artifact's rows (`GeneratedInput`, `GeneratedInputs`) and its JSONL files: written by `autorl
inputs` and the inputs stage, read back, and a user's own inputs file (`--inputs-file`) read and split."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal, NamedTuple, get_args

from pydantic import BaseModel, Field

from ruler.calls import CallRecord

from ..errors import AutoRLError
from .dedup import DEFAULT_VAL_FRACTION, DedupIndex, Split, split_train_val

Difficulty = Literal["easy", "medium", "hard"]


class GeneratedInput(BaseModel):
    """One row of the inputs artifact. An input read from an inputs file (`inputs_from_file`) has no
    generator call: its `difficulty`, `generator`, `prompt_hash` and `attempt` are None (left out of the
    JSONL row)."""

    input: str
    """The user message given to the policy."""
    split: Split
    """"train" or "val"."""
    difficulty: Difficulty | Annotated[int, Field(ge=1, le=5)] | None = None
    """Difficulty the generator was asked for in the call that wrote this input ("easy", "medium", "hard"); for an
    MCP•RL scenario (`autorl.inputs.scenarios`), the generator's own rating, 1 (one tool call) to 5 (many steps)."""
    generator: str | None = None
    """Model that wrote it (no credentials)."""
    prompt_hash: str | None = None
    """SHA-256 prefix of the messages sent in that call."""
    attempt: int | None = None
    """Number of that generator call, from 1."""


class GenerationStats(BaseModel):
    """Counts over all input-generation calls."""

    calls: int = 0
    """Generator calls made for inputs."""
    unusable_calls: int = 0
    """Calls whose reply did not parse."""
    raw: int = 0
    """Inputs in parsed replies."""
    rejected: int = 0
    """Inputs dropped as too short or cut off at max_chars."""
    rejected_junk: int = 0
    """Inputs dropped as placeholder-like junk: template echoes, single identifiers, too few words, copies of
    the instructions (`autorl.inputs.checks.junk_reason`)."""
    duplicates: int = 0
    """Inputs dropped as exact or near-duplicates of a kept one."""
    unique: int = 0
    """Inputs kept (can exceed N: the last round of calls may overshoot; the first N are used)."""

    @property
    def duplicate_rate(self) -> float:
        """Share of the length-valid, non-junk inputs that were duplicates, before dedup."""
        valid = self.raw - self.rejected - self.rejected_junk
        return self.duplicates / valid if valid else 0.0

    @property
    def unique_per_call(self) -> float:
        return self.unique / self.calls if self.calls else 0.0


class GeneratedInputs(BaseModel):
    """What `generate_inputs` returns."""

    system_prompt: str | None
    """None when generated with `write_system_prompt=False`."""
    system_prompt_fallback: str | None = None
    """Why the generated system prompt was rejected and the task description used instead; None when it passed."""
    inputs: list[GeneratedInput]
    stats: GenerationStats
    calls: list[CallRecord] = []
    """The generator requests made (`ruler.calls`), the system prompt's included; none for an inputs file."""

    @property
    def train(self) -> list[str]:
        return [row.input for row in self.inputs if row.split == "train"]

    @property
    def val(self) -> list[str]:
        return [row.input for row in self.inputs if row.split == "val"]


def check_writable(path: str | Path) -> None:
    """Prove that `path` can be written, before the work that fills it: its directory is made and a file can be
    made there (one left behind only if it existed). One `AutoRLError` line saying why not."""
    path = Path(path)
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    try:
        if blocker is not None:
            raise NotADirectoryError(0, f"{blocker} is a file, not a directory")
        if path.is_dir():
            raise IsADirectoryError(0, "it is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with open(path, "a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise AutoRLError(f"cannot write {path} ({exc.strerror})") from None


def write_inputs_jsonl(rows: Iterable[GeneratedInput], path: str | Path) -> Path:
    """Write one JSON object per input (`pandas.read_json(path, lines=True)` reads it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(row.model_dump_json(exclude_none=True) + "\n" for row in rows), encoding="utf-8")
    return path


def read_inputs_jsonl(path: str | Path) -> list[GeneratedInput]:
    """The rows `write_inputs_jsonl` wrote."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [GeneratedInput.model_validate_json(line) for line in lines if line.strip()]


class InputRow(NamedTuple):
    """One row of a user's inputs file."""

    input: str
    """The input, stripped of surrounding whitespace."""
    split: Split | None
    """The split the row asks for; None: split like generated inputs."""


def read_input_rows(path: str | Path) -> list[InputRow]:
    """The rows of a JSONL inputs file: each a JSON object with a non-empty string `input` and, optionally,
    `split` ("train" or "val"); other fields are ignored, blank lines skipped.

    Raises AutoRLError with one line naming the file and the line (`inputs.jsonl:3: ...`) when a row is
    not a JSON object with an `input`, or has another split; also when the file is missing or has no rows.
    """
    rows = []
    for number, line in enumerate(_read_inputs_file(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AutoRLError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("input"), str) or not row["input"].strip():
            raise AutoRLError(f'{path}:{number}: expected a JSON object with a non-empty string field "input"')
        if row.get("split") not in (None, *get_args(Split)):
            raise AutoRLError(f'{path}:{number}: "split" must be "train" or "val", got {row["split"]!r}')
        rows.append(InputRow(row["input"].strip(), row.get("split")))
    if not rows:
        raise AutoRLError(f'inputs file {path} has no inputs; write one JSON object per line with an "input" field')
    return rows


def inputs_file_digest(path: str | Path) -> str:
    """SHA-256 of an inputs file's content: what a cache key of its inputs depends on, not its path."""
    return hashlib.sha256(_read_inputs_file(path).encode()).hexdigest()


def _read_inputs_file(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AutoRLError(f"inputs file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AutoRLError(f"inputs file {path} cannot be read: {exc}") from None


def inputs_from_file(path: str | Path, seed: int = 0, val_fraction: float = DEFAULT_VAL_FRACTION) -> GeneratedInputs:
    """The inputs of a JSONL inputs file (`read_input_rows`), split as generated inputs are.

    Exact duplicates after normalization (`autorl.inputs.dedup.normalize`: case, punctuation, whitespace) are
    dropped, the first kept (counted in `stats.duplicates`); near-duplicates are the user's choice and
    stay (a short "What is the opposite of up?" is 0.8 similar to "... of hot?"). The rows without a
    `split` are split by `split_train_val` with `val_fraction` and `seed`, the others keep theirs.
    Raises AutoRLError when that leaves no train or no validation input.
    """
    rows = read_input_rows(path)
    index = DedupIndex(threshold=1.0)  # equal trigram sets only
    kept = [row for row in rows if index.add(row.input)]
    splits = iter(split_train_val([row.input for row in kept if row.split is None], val_fraction, seed))
    inputs = [GeneratedInput(input=row.input, split=row.split or next(splits)) for row in kept]
    counts = Counter(row.split for row in inputs)
    if not counts["train"] or not counts["val"]:
        raise AutoRLError(
            f"inputs file {path}: {counts['train']} train and {counts['val']} validation inputs after splitting "
            f"({len(rows) - len(kept)} duplicates dropped); a run needs at least one of each: add rows or give "
            'some a "split"'
        )
    stats = GenerationStats(raw=len(rows), duplicates=len(rows) - len(kept), unique=len(kept))
    return GeneratedInputs(system_prompt=None, inputs=inputs, stats=stats)
