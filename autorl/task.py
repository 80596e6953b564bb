"""The task a user trains an agent for: a plain-text description, or a TOML task file.

A TOML task file maps one to one onto `TaskSpec`: every key is a field below (tools are `[[tools]]`
tables, the run's training settings `[train]` and `[trainer]` tables), and a key that is not a field is
an error that names it. The README documents the fields with an example; `pipelines/tasks/` holds
ready-made task files.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import AutoRLError


class ToolSpec(BaseModel):
    """A function the agent may call, described the way the OpenAI tools API expects."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    """Function name the model calls (letters, digits, `_` and `-`, at most 64 characters)."""
    description: str = ""
    """What the function does, shown to the model and to the judge."""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON schema of the arguments: an object schema (`type = "object"`, `properties = {...}`)."""

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON schema with type = "object"')
        return value

    def to_openai(self) -> dict[str, Any]:
        """This tool as an entry of the OpenAI `tools` request parameter."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class TaskSpec(BaseModel):
    """Everything the pipeline knows about a task; only `description` is required."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    description: str
    """What the agent must do, in plain text, including the answer format you expect. The generator
    writes the system prompt and the inputs from it, and the judge reads it."""
    generator_instructions: str = ""
    """Extra instructions for the input generator only: topics to cover, style, language, edge cases."""
    seed_examples: list[str] = Field(default_factory=list)
    """A few example inputs that show the generator the expected style. They are not part of the data
    set: generated copies and near-copies of them are dropped as duplicates."""
    num_inputs: int = Field(32, gt=0)
    """How many unique inputs to generate, train and validation together."""
    rubric: str = ""
    """What the judge rewards, in plain text; empty uses the judge's default rubric."""
    tools: list[ToolSpec] = Field(default_factory=list)
    """Functions the agent may call during a rollout (`[[tools]]` tables)."""
    inputs_file: Path | None = None
    """A JSONL file of the inputs to train and validate on, instead of generated ones: one JSON object per
    line with an `input` string and optionally a `split` ("train" or "val"; rows without one are split
    like generated inputs). All of its inputs are used: `num_inputs` does not apply. A relative path in a
    task file is relative to the file's directory."""
    train: dict[str, Any] = Field(default_factory=dict)
    """The `[train]` table: settings of every GRPO update of a run, by `autorl.config.TrainConfig` field
    (`learning_rate`, `loss`, ...). `autorl run` flags override them; a field set in neither takes its
    default (the loss's own default, where it has one)."""
    trainer: dict[str, Any] = Field(default_factory=dict)
    """The `[trainer]` table: how a run's LoRA is built and trained, by `autorl.config.TrainerConfig` field
    (`lora_rank`, `target_modules`, ...); `autorl run` flags override them."""

    @field_validator("description")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()


RUN_SETTINGS = frozenset({"inputs_file", "train", "trainer"})
"""The `TaskSpec` fields that set up a run rather than describe its task. A run's config takes them over
(`pipelines.config.RunConfig.for_task`, which also checks the tables' keys): the pipeline reads them
there, and changing them keeps a run's name."""


def load_task(source: str | Path) -> TaskSpec:
    """A task from a TOML task file (a Path, or a string ending in `.toml`) or from a plain description.

    Raises AutoRLError with one line naming the file, the field and the problem.
    """
    if isinstance(source, Path):
        return _load_task_file(source)
    if not source.strip():
        raise AutoRLError("the task is empty: give a plain-text description or the path of a .toml task file")
    if source.strip().endswith(".toml"):
        return _load_task_file(Path(source.strip()))
    return _validated({"description": source}, "task")


def _load_task_file(path: Path) -> TaskSpec:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AutoRLError(f"task file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AutoRLError(f"task file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AutoRLError(f"task file {path} is not valid TOML: {exc}") from None
    task = _validated(data, f"task file {path}")
    if task.inputs_file is not None:
        task.inputs_file = path.parent / task.inputs_file  # an absolute path stays as it is
    return task


def _validated(data: dict[str, Any], where: str) -> TaskSpec:
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(describe_error(error) for error in exc.errors())
        raise AutoRLError(f"{where}: {problems}") from None


def describe_error(error: Any, model: type[BaseModel] | None = None) -> str:
    """One validation error as `field 'tools[0].name': <why>`; an unknown key's error lists the fields of
    `model` (by default the `TaskSpec` or `ToolSpec` that holds it)."""
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    if error["type"] == "extra_forbidden":
        model = model or (ToolSpec if error["loc"][0] == "tools" else TaskSpec)
        return f"unknown field '{field}' (known fields: {', '.join(model.model_fields)})"
    if error["type"] == "missing":
        return f"field '{field}' is required"
    why = error["msg"].removeprefix("Value error, ")
    return f"field '{field}': {why} (got {_shorten(repr(error['input']))})"


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
