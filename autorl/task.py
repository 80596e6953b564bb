"""The task a user trains an agent for: a plain-text description, or a TOML task file.

A TOML task file maps one to one onto `TaskSpec`: every key is a field below (tools are `[[tools]]`
tables, MCP servers `[[mcp_servers]]` tables, the run's settings `[train]`, `[trainer]`, `[cluster]` and
`[sentinel]` tables, `inputs_file`, `keep_checkpoints` and `backend`), and a key that is not a field is an error
that names it (`[cluster] backend`, the old place of `backend`, still works with a warning). Relative paths in a
task file (an inputs file, a tool's `function` file, an MCP server's `cwd`) are relative to the file's directory,
which is also where a stdio MCP server runs by default; `load_task` makes them absolute. The tools
themselves are loaded and the servers started by `autorl.agents.tools.Toolbox`. docs/inputs.md documents
the fields with an example; `pipelines/tasks/` holds ready-made task files.
"""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .errors import AutoRLError

log = logging.getLogger("autorl")
_WARNED_FOREIGN: set[Path] = set()
"""Task files from outside the current directory and home already warned about (once per process)."""

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
"""The arguments schema of a tool that takes no arguments."""
MAX_TEXT_CHARS = 20_000
"""The longest task description, system prompt or rubric, in characters (about 5,000 tokens): each goes into
every generator or judge request (the judge is told the task in every group it scores), and a small model's
context is 2,048 tokens, so a longer one is a mistake (a file pasted as the task) rather than a task."""
TASK_FILE_SUFFIX = ".toml"
"""What a task file's name ends with (in any case); another existing file is refused, never taken as text."""
_LONGEST_PATH = 4096


class ToolSpec(BaseModel):
    """A function the agent may call, described the way the OpenAI tools API expects.

    With `function` set, calling the tool runs that Python function; without it the tool is only
    described (the model sees it, and a call returns an error text saying it has no implementation).
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    """Function name the model calls (letters, digits, `_` and `-`, at most 64 characters)."""
    description: str = ""
    """What the function does, shown to the model and to the judge; empty takes the first paragraph of
    `function`'s docstring."""
    parameters: dict[str, Any] | None = None
    """JSON schema of the arguments: an object schema (`type = "object"`, `properties = {...}`). Omitted,
    it comes from `function`'s signature and docstring (see `autorl.agents.tools.signature_schema`), or is an
    empty object schema for a tool without `function`."""
    function: str | None = None
    """The Python function that runs the tool, sync or async: `file.py:name` (a relative file path is
    relative to the task file's directory) or `package.module:name`. It is called with the arguments
    as keywords; a result that is not a string reaches the model JSON-encoded."""

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if value.get("type") != "object":
            raise ValueError('must be a JSON schema with type = "object"')
        import jsonschema

        try:
            jsonschema.validators.validator_for(value).check_schema(value)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"not a valid JSON schema: {exc.message}") from None
        return value

    @field_validator("function")
    @classmethod
    def _function_spec(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[^:]+:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", value):
            raise ValueError("must be `file.py:name` or `module:name`")
        return value

    @model_validator(mode="after")
    def _default_schema(self) -> ToolSpec:
        if self.parameters is None and self.function is None:
            self.parameters = dict(EMPTY_SCHEMA)
        return self

    def to_openai(self) -> dict[str, Any]:
        """This tool as an entry of the OpenAI `tools` request parameter. A `function` tool without
        `parameters` has its schema made from the function: use `autorl.agents.tools.Toolbox.openai_tools()`."""
        if self.parameters is None:
            raise ValueError(
                f"tool {self.name!r} takes its parameters from its function {self.function!r}: "
                "use autorl.agents.tools.Toolbox.openai_tools()"
            )
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class McpServerSpec(BaseModel):
    """An MCP server whose tools the agent may call: a stdio `command` that autorl starts once per run
    (and stops at its end), or the `url` of a streamable-HTTP server that is already running."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    command: list[str] | None = None
    """The command line of a stdio server, e.g. `["python", "notes_server.py"]`; it runs in `cwd`. A
    leading `python` or `python3` is the interpreter running autorl."""
    url: str | None = Field(None, pattern=r"^https?://")
    """The endpoint of a streamable-HTTP server, e.g. `http://127.0.0.1:8765/mcp`."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of a stdio server, by name and value. A stdio server does not inherit autorl's
    environment (its API keys stay with autorl): it gets the MCP SDK's minimal one (HOME, PATH, SHELL, TERM,
    USER, LOGNAME), the variables `pass_env` names, and these. Records keep their names, never their values."""
    pass_env: list[str] = Field(default_factory=list)
    """Names of variables of autorl's environment a stdio server also gets, with their values, e.g.
    `["GITHUB_TOKEN"]`: how a secret reaches a server without being written in the task file. A name that is
    not set is an error when the server starts."""
    cwd: Path | None = None
    """Working directory of a stdio server. In a task file it defaults to the file's directory, and a
    relative `cwd` is relative to it; elsewhere it defaults to the current directory."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (a stdio server) or `url` (a streamable-HTTP server)")
        if self.command is not None and not (self.command and self.command[0]):
            raise ValueError("`command` must name a program")
        if self.url is not None and (self.env or self.cwd or self.pass_env):
            raise ValueError("`env`, `pass_env` and `cwd` apply to a stdio server (`command`), not to a `url`")
        return self

    @property
    def label(self) -> str:
        """How messages name this server: its command line or its URL."""
        return " ".join(self.command) if self.command else str(self.url)


class TaskSpec(BaseModel):
    """Everything the pipeline knows about a task; only `description` is required."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    description: str = Field(max_length=MAX_TEXT_CHARS)
    """What the agent must do, in plain text, including the answer format you expect (at most 20,000
    characters, `MAX_TEXT_CHARS`). The generator writes the system prompt and the inputs from it, and the
    judge reads it."""
    system_prompt: str | None = Field(None, max_length=MAX_TEXT_CHARS)
    """The policy's system prompt, used as written; unset: the generator writes one from the description
    (a model call and, with the embedded generator, a server start)."""
    generator_instructions: str = ""
    """Extra instructions for the input generator only: topics to cover, style, language, edge cases."""
    seed_examples: list[str] = Field(default_factory=list)
    """A few example inputs that show the generator the expected style. They are not part of the data
    set: generated copies and near-copies of them are dropped as duplicates."""
    num_inputs: int = Field(32, gt=0)
    """How many unique inputs to generate, train and validation together."""
    rubric: str = Field("", max_length=MAX_TEXT_CHARS)
    """What the judge rewards, in plain text; empty uses the judge's default rubric."""
    max_turns: int = Field(4, ge=1)
    """Model turns per rollout: the agent answers, or calls tools and sees their results, up to this many
    times."""
    tool_timeout_s: float = Field(30, gt=0)
    """Seconds a tool call may take; a slower call returns an error text to the model."""
    mcp_servers: list[McpServerSpec] = Field(default_factory=list)
    """MCP servers whose tools the agent may call (`[[mcp_servers]]` tables)."""
    tools: list[ToolSpec] = Field(default_factory=list)
    """Functions the agent may call during a rollout (`[[tools]]` tables)."""
    inputs_file: Path | None = None
    """A JSONL file of the inputs to train and validate on, instead of generated ones: one JSON object per
    line with an `input` string and optionally a `split` ("train" or "val"; rows without one are split
    like generated inputs). All of its inputs are used: `num_inputs` does not apply. A relative path in a
    task file is relative to the file's directory."""
    backend: str | None = None
    """URL of an `autorl serve` that serves and trains the run's policy (`autorl run --backend`, which must name
    the same URL unless it is loopback: a task file alone does not send a run off this machine); unset: this
    machine, or the `[cluster]` table's Ray cluster."""
    keep_checkpoints: str | None = None
    """Which checkpoints a run's training keeps (`autorl run --keep-checkpoints`, which overrides it): all, or
    a comma-separated set of latest, latest:N, best and every:N; unset: all."""
    train: dict[str, Any] = Field(default_factory=dict)
    """The `[train]` table: settings of every GRPO update of a run, by `autorl.config.TrainConfig` field
    (`learning_rate`, `loss`, ...). `autorl run` flags override them; a field set in neither takes its
    default (the loss's own default, where it has one)."""
    trainer: dict[str, Any] = Field(default_factory=dict)
    """The `[trainer]` table: how a run's LoRA is built and trained, by `autorl.config.TrainerConfig` field
    (`lora_rank`, `target_modules`, ...); `autorl run` flags override them."""
    cluster: dict[str, Any] = Field(default_factory=dict)
    """The `[cluster]` table: where a run is served and trained, by `autorl.backends.cluster.config.ClusterConfig`
    field (`ray = "auto"`, `replicas = 4`, ...); `autorl run --ray` and `--replicas` override them."""
    sentinel: dict[str, Any] = Field(default_factory=dict)
    """The `[sentinel]` table: what a run does when the policy drifts far from the base model while its reward
    rises, by `pipelines.sentinel.SentinelConfig` field (`on_drift = "stop"`, `rollback_kl_beta`, ...);
    `autorl run --on-drift` overrides it."""
    _file: Path | None = PrivateAttr(None)
    """The task file it was loaded from (`load_task`), if any: a run records its path, not its secrets."""

    @property
    def source_file(self) -> Path | None:
        """The absolute path of the task file this task was loaded from; None for a task given as text or built
        in code. A run records it, so `autorl benchmark` can read the MCP servers' `env` values again, which
        run.json does not keep."""
        return self._file

    @field_validator("description", "system_prompt")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    def has_tools(self) -> bool:
        """Whether the agent has tools: `[[tools]]` or `[[mcp_servers]]`."""
        return bool(self.tools or self.mcp_servers)

    def agent_settings(self) -> dict[str, Any]:
        """What a rollout of this task depends on besides the model and the input, for cache keys: its
        tools (a function tool by its `function` spec, an MCP server by its command or URL, not their
        code), turns and tool timeout; empty without tools (a single-turn answer)."""
        if not self.has_tools():
            return {}
        return {
            "tools": [tool.model_dump(mode="json") for tool in self.tools],
            "mcp_servers": [server.model_dump(mode="json") for server in self.mcp_servers],
            "max_turns": self.max_turns,
            "tool_timeout_s": self.tool_timeout_s,
        }


RUN_SETTINGS = frozenset({"inputs_file", "keep_checkpoints", "backend", "train", "trainer", "cluster", "sentinel"})
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
    if source.strip().lower().endswith(TASK_FILE_SUFFIX):
        return _load_task_file(Path(source.strip()))
    if _is_file(source.strip()):
        raise AutoRLError(
            f"{source.strip()} is a file, not a task file (a task file's name ends in .toml): give a .toml "
            "task file, or the task itself in plain text"
        )
    return _validated({"description": source}, "task")


def _is_file(text: str) -> bool:
    """Whether `text` names an existing file (a text too long, or with a NUL, names none)."""
    if len(text) > _LONGEST_PATH or "\n" in text:
        return False
    try:
        return Path(text).expanduser().is_file()
    except (OSError, ValueError):
        return False


def _load_task_file(path: Path) -> TaskSpec:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AutoRLError(f"task file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AutoRLError(f"task file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AutoRLError(f"task file {path} is not valid TOML: {exc}") from None
    task = _validated(_moved_keys(data, path), f"task file {path}")
    task._file = path.absolute()
    here = path.parent.absolute()
    if task.inputs_file is not None:
        task.inputs_file = path.parent / task.inputs_file  # an absolute path stays as it is
    for tool in task.tools:
        source, _, name = (tool.function or "").rpartition(":")
        if source.endswith(".py"):
            tool.function = f"{here / source}:{name}"
    for server in task.mcp_servers:
        if server.command is not None:
            server.cwd = here / (server.cwd or "")
    warn_if_foreign(task, path)
    return task


def _moved_keys(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """`data` with the keys a task file had at an earlier place moved to their own, one warning line each:
    `[cluster] backend` is the top-level `backend` (the `[cluster]` table is the Ray cluster's)."""
    cluster = data.get("cluster")
    if not isinstance(cluster, dict) or "backend" not in cluster:
        return data
    moved = {**data, "cluster": {k: v for k, v in cluster.items() if k != "backend"}}
    if "backend" in data and data["backend"] != cluster["backend"]:
        raise AutoRLError(f"task file {path}: backend and [cluster] backend differ; keep the top-level backend only")
    moved["backend"] = cluster["backend"]
    log.warning("task file %s: `[cluster] backend` is deprecated; write `backend = ...` above the tables", path)
    return moved


def warn_if_foreign(task: TaskSpec, path: Path) -> None:
    """Say once that a task file with tools or MCP servers runs code, when it comes from outside the current
    directory and the home directory (a file somebody else wrote: its tools are imported, its commands run)."""
    where = path.resolve()
    if not task.has_tools() or where in _WARNED_FOREIGN:
        return
    if any(where.is_relative_to(trusted.resolve()) for trusted in (Path.cwd(), Path.home())):
        return
    _WARNED_FOREIGN.add(where)
    log.warning(
        "task file %s is outside this directory and your home, and it runs code (%d tools, %d MCP servers): "
        "read it before you run it",
        where,
        len(task.tools),
        len(task.mcp_servers),
    )


def _validated(data: dict[str, Any], where: str) -> TaskSpec:
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(describe_error(error) for error in exc.errors())
        raise AutoRLError(f"{where}: {problems}") from None


def describe_error(error: Any, model: type[BaseModel] | None = None) -> str:
    """One validation error as `field 'tools[0].name': <why>`; an unknown key's error lists the fields of
    `model` (by default the `TaskSpec`, `ToolSpec` or `McpServerSpec` that holds it)."""
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    if error["type"] == "extra_forbidden":
        model = model or {"tools": ToolSpec, "mcp_servers": McpServerSpec}.get(error["loc"][0], TaskSpec)
        return f"unknown field '{field}' (known fields: {', '.join(model.model_fields)})"
    if error["type"] == "missing":
        return f"field '{field}' is required"
    why = error["msg"].removeprefix("Value error, ")
    return f"field '{field}': {why} (got {_shorten(repr(error['input']))})"


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
