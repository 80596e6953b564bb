"""The tools a task's agent calls: Python functions (`[[tools]]` with `function`) and MCP servers' tools.

`Toolbox.open(task)` loads the functions and starts each MCP server once; `openai_tools()` is the OpenAI
`tools` request parameter; `call(name, arguments)` runs one tool call of the model and returns the text
the model sees next. A problem with a call never raises: an unknown tool, arguments that are not JSON or
do not match the tool's schema, a function that raises, a call slower than `TaskSpec.tool_timeout_s`, a
tool without an implementation, an MCP error result: each returns a short text starting with `error:`.
The one exception is an MCP server that died a second time (`autorl.errors.McpServerDied`, an
`AutoRLError`), after which the run cannot go on.

A function tool without `parameters` gets its JSON schema from its signature (`tool_schema.signature_schema`).
A function may keep memory between the calls of one rollout through a `RolloutState` parameter (`tool_state`).
"""

from __future__ import annotations

import asyncio
import collections
import collections.abc
import hashlib
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
from pydantic_core import to_jsonable_python

from ..errors import AutoRLError, McpServerDied
from ..task import TaskSpec, ToolSpec
from ..threads import in_daemon_thread
from .tool_schema import parse_docstring, signature_schema
from .tool_state import RolloutState, state_parameter

if TYPE_CHECKING:
    import mcp.types

    from .mcp import McpServer

ERROR_LIMIT = 400
"""Characters an error text keeps (the model sees it; a long traceback message would crowd it out)."""


class ToolResult(str):
    """What the model sees after a tool call (this string), and whether the tool answered (`ok`) or the
    text reports a problem (`ok` False, the text starts with `error:`)."""

    ok: bool

    def __new__(cls, text: str, ok: bool) -> ToolResult:
        result = super().__new__(cls, text)
        result.ok = ok
        return result

    @property
    def text(self) -> str:
        """The result as a plain `str`."""
        return str(self)


@dataclass
class Tool:
    """One tool as the model sees it, and how it runs (`run` is None for a description-only tool)."""

    name: str
    description: str
    parameters: dict[str, Any]
    source: str
    """Where it comes from, for messages: `function unit_tools.py:convert`, `MCP server ...`."""
    run: Callable[[dict[str, Any], RolloutState], Awaitable[tuple[bool, Any]]] | None = None
    """Runs a call on validated arguments, with the calling rollout's state: (False, error text) or (True,
    result)."""
    server: McpServer | None = None

    def __post_init__(self) -> None:
        try:
            self._validator = jsonschema.validators.validator_for(self.parameters)(self.parameters)
            self._validator.check_schema(self.parameters)
        except jsonschema.SchemaError:
            self._validator = None  # a server's broken schema: its arguments go unchecked

    def openai(self) -> dict[str, Any]:
        """This tool as an entry of the OpenAI `tools` request parameter."""
        return ToolSpec.model_construct(
            name=self.name, description=self.description, parameters=self.parameters
        ).to_openai()

    def argument_problem(self, arguments: dict[str, Any]) -> str | None:
        if self._validator is None:
            return None
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path)
        return error.message + (f" (at {where})" if where else "")


class Toolbox:
    """The tools a task's agent may call: Python functions ([[tools]] with `function`) and the tools of
    MCP servers ([[mcp_servers]]).

    Open it once per run in the event loop that makes the calls, and close it there (or use
    `async with await Toolbox.open(task) as toolbox:`); calls may come from any task of that loop.
    """

    def __init__(self, tools: list[Tool], servers: list[McpServer], timeout_s: float):
        self.tools = {tool.name: tool for tool in tools}
        self.servers = servers
        self.timeout_s = timeout_s
        self.calls: collections.Counter[str] = collections.Counter()
        """Tool calls by outcome: `ok` (the tool answered) and `error` (the model got an error text)."""

    @property
    def server_failures(self) -> dict[str, int]:
        """Deaths of each MCP server by its label (a server is restarted after its first)."""
        return {server.label: server.failures for server in self.servers}

    @classmethod
    async def open(cls, task: TaskSpec, log_dir: Path | None = None) -> Toolbox:
        """Load the task's functions and start its MCP servers (each once) and list their tools.

        `log_dir` receives each stdio server's stderr as `mcp-<n>.log`. Raises AutoRLError (one line)
        for a function that cannot be loaded or described, a server that does not start, or two tools
        with one name.
        """
        tools = [_function_tool(spec) for spec in task.tools]
        if task.mcp_servers:
            from .mcp import McpServer  # the mcp package takes a second to import

            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
        servers = [
            McpServer(spec, log_dir / f"mcp-{number}.log" if log_dir else None)
            for number, spec in enumerate(task.mcp_servers)
        ]
        started = await asyncio.gather(*(server.start() for server in servers), return_exceptions=True)
        try:
            for outcome in started:
                if isinstance(outcome, BaseException):
                    raise outcome
            for server in servers:
                tools += [_mcp_tool(server, tool) for tool in server.tools]
            seen: dict[str, str] = {}
            for tool in tools:
                if tool.name in seen:
                    sources = f"from {seen[tool.name]} and from {tool.source}"
                    raise AutoRLError(f"two tools are named {tool.name!r}: {sources}")
                seen[tool.name] = tool.source
        except BaseException:
            await asyncio.gather(*(server.aclose() for server in servers))
            raise
        return cls(tools, servers, task.tool_timeout_s)

    def openai_tools(self) -> list[dict[str, Any]]:
        """The OpenAI `tools` request parameter: the task's `[[tools]]` in file order, then each MCP
        server's tools in the order it lists them."""
        return [tool.openai() for tool in self.tools.values()]

    async def call(self, name: str, arguments: str | dict[str, Any], state: RolloutState | None = None) -> ToolResult:
        """Run one tool call of the model (`arguments`: its raw JSON string, or a dict already parsed) and
        return what the model sees, a `str`: the result (JSON-encoded unless a string), or a text starting
        with `error:` (`ToolResult.ok` tells them apart). `state` is the calling rollout's memory, handed to
        a function that takes a `RolloutState` (without it, the call has a memory of its own).

        Raises only McpServerDied (an MCP server died a second time) and cancellation.
        """
        ok, text = await self._outcome(name, arguments, RolloutState() if state is None else state)
        self.calls["ok" if ok else "error"] += 1
        return ToolResult(text if ok else _shorten(text), ok)

    async def _outcome(self, name: str, arguments: str | dict[str, Any], state: RolloutState) -> tuple[bool, str]:
        tool = self.tools.get(name)
        if tool is None:
            return False, f"error: unknown tool {name!r}; available: {', '.join(self.tools) or 'none'}"
        try:
            args = arguments if isinstance(arguments, dict) else json.loads(arguments) if arguments.strip() else {}
        except (json.JSONDecodeError, TypeError, AttributeError) as exc:
            return False, f"error: the arguments of {name!r} are not valid JSON ({exc})"
        if not isinstance(args, dict):
            return False, f"error: the arguments of {name!r} must be a JSON object, not {type(args).__name__}"
        problem = tool.argument_problem(args)
        if problem:
            return False, f"error: invalid arguments for {name!r}: {problem}"
        if tool.run is None:
            return False, f"error: tool {name!r} has no implementation (it is only described in the task)"
        if tool.server is not None:
            await tool.server.ready()  # a restart of its server does not count against the call's time
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                ok, result = await tool.run(args, state)
        except McpServerDied:
            raise
        except (Exception, SystemExit) as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                if tool.server is not None and (stopped := await tool.server.lost_during_call(name)) is not None:
                    return False, stopped  # the server died: noticed after the deadline, still a death
                return False, f"error: {name!r} did not finish within {self.timeout_s:g} s"
            return False, f"error: {name!r} raised {type(exc).__name__}: {exc}"
        if not ok or isinstance(result, str):
            return ok, result
        try:
            return True, json.dumps(result, ensure_ascii=False, default=_jsonable)
        except (TypeError, ValueError) as exc:
            return False, f"error: the result of {name!r} cannot be JSON-encoded ({exc})"

    def describe(self) -> str:
        """The tools (name, description, JSON schema of the arguments) and MCP servers' resources as
        plain text, for a model that writes inputs which need them."""
        lines = ["Tools the agent can call:"]
        for tool in self.tools.values():
            lines.append(f"- {tool.name}: {tool.description or '(no description)'}")
            lines.append(f"  arguments (JSON schema): {json.dumps(tool.parameters, ensure_ascii=False)}")
        for server in self.servers:
            if server.resources:
                lines.append(f"Resources of MCP server {server.label!r}:")
                for resource in server.resources:
                    about = f": {resource.description}" if resource.description else ""
                    lines.append(f"- {resource.uri} ({resource.name}){about}")
        return "\n".join(lines)

    async def aclose(self) -> None:
        """Stop the MCP servers."""
        await asyncio.gather(*(server.aclose() for server in self.servers))

    async def __aenter__(self) -> Toolbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _function_tool(spec: ToolSpec) -> Tool:
    """A `[[tools]]` entry as a Tool: its function loaded and, without `parameters`, described."""
    if spec.function is None:
        return Tool(spec.name, spec.description, spec.parameters, "the task's [[tools]] (no function)")
    where = f"tool {spec.name!r}: function {spec.function!r}"
    try:
        function = load_function(spec.function)
        state = state_parameter(function)
    except Exception as exc:
        raise AutoRLError(f"{where} cannot be loaded: {_one_line(exc)}") from None
    parameters = spec.parameters
    if parameters is None:
        try:
            parameters, summary = signature_schema(function)
        except (TypeError, ValueError) as exc:
            raise AutoRLError(f"{where}: {exc}; give the tool's `parameters` in the task file") from None
    else:
        summary = parse_docstring(inspect.getdoc(function) or "")[0]
    source = f"function {spec.function}"
    return Tool(spec.name, spec.description or summary, parameters, source, _runner(function, state))


def _mcp_tool(server: McpServer, tool: mcp.types.Tool) -> Tool:
    async def run(arguments: dict[str, Any], state: RolloutState) -> tuple[bool, Any]:
        return await server.call_tool(tool.name, arguments)  # an MCP server keeps its own state

    schema = tool.input_schema or {"type": "object", "properties": {}}
    return Tool(tool.name, tool.description or "", schema, f"MCP server {server.label!r}", run, server)


def load_function(spec: str) -> Callable[..., Any]:
    """The function named by `file.py:name` or `module:name` (`name` may be dotted: `Class.method`).

    A file is imported once per path, with its directory on `sys.path` while it runs, so it can import
    modules beside it.
    """
    source, _, attribute = spec.rpartition(":")
    if source.endswith(".py"):
        path = Path(source).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no file {path}")
        module_name = f"autorl_tools_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}_{path.stem}"
        module = sys.modules.get(module_name)
        if module is None:
            module_spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_name] = module
            sys.path.insert(0, str(path.parent))
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[module_name]
                raise
            finally:
                sys.path.remove(str(path.parent))
    else:
        module = importlib.import_module(source)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise AttributeError(f"{source} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{attribute} is a {type(target).__name__}, not a function")
    return target


def _runner(
    function: Callable[..., Any], state_name: str | None
) -> Callable[[dict[str, Any], RolloutState], Awaitable[tuple[bool, Any]]]:
    """Run `function` on keyword arguments (and the rollout's state as `state_name`, when it takes one):
    awaited if async, else in a daemon thread that a timeout abandons (a hanging function cannot be stopped,
    but it neither blocks the loop nor the exit)."""

    async def run(arguments: dict[str, Any], state: RolloutState) -> tuple[bool, Any]:
        if state_name is not None:
            arguments = {**arguments, state_name: state}
        if inspect.iscoroutinefunction(function):
            return True, await function(**arguments)
        result = await in_daemon_thread(lambda: function(**arguments), f"tool {getattr(function, '__name__', '')}")
        if inspect.isawaitable(result):
            result = await result
        return True, result

    return run


def _jsonable(value: Any) -> Any:
    """What json.dumps cannot encode itself: pydantic models, dataclasses, dates, ...; else its str()."""
    try:
        return to_jsonable_python(value)
    except Exception:
        return str(value)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def _shorten(text: str) -> str:
    text = text.replace("\n", " ") if len(text) > ERROR_LIMIT else text
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - 3] + "..."
