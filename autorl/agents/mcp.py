"""The MCP servers of a task (`[[mcp_servers]]`): started once per run, listed, called, stopped.

`McpServer` runs one server through the `mcp` package's client: a stdio server as a child process
(`mcp.client.stdio.stdio_client`), or a streamable-HTTP server by URL
(`mcp.client.streamable_http.streamable_http_client`), with an `mcp.ClientSession` over either.

The `mcp` client is built on anyio task groups and cancel scopes, which must be entered and left by the
same task. So each connection is owned by one background asyncio task: it enters the transport and the
session, lists the server's tools and resources, then serves `call_tool` requests from a queue, each in a
task of its own task group, and leaves everything when the connection is closed. Callers only queue a
request and await its future, so a server may be opened, called and closed from different tasks.

Environment: a stdio server does not inherit autorl's (its API keys stay with autorl): it gets the MCP SDK's
minimal one, the variables its spec's `pass_env` names, and its `env` (`server_environment`).

Lifetime: `McpServer.aclose` stops a stdio server (stdin closed, then SIGTERM/SIGKILL to its process
group, as the `mcp` client does). Ctrl-C and SIGTERM stop it too, as `asyncio.run` cancels the owner
task on the way out. A stdio server is started through `autorl/serving/die_with_parent.py`, so the kernel
sends it SIGTERM if autorl itself dies without cleaning up (a crash, SIGKILL).

A server that dies (a call finds its connection closed) is restarted once: the call that found it dead
returns an error text at once, `McpServer.failures` counts the death, and later calls wait for the
restart. A second death, or a failed restart, raises `McpServerDied` (an `AutoRLError`, one line) from
the call that finds it and from every later call of the server: a run cannot go on without it. A call that
runs past the tool timeout is a timeout only if its server is alive (`McpServer.lost_during_call` asks it
for a ping): a death noticed after the deadline (its closed pipe read late on a loaded machine) is still a
death, so whether a call died or timed out never depends on how fast the loss was noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ..errors import McpServerDied
from ..serving.die_with_parent import wrapped
from ..task import McpServerSpec

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
"""Seconds a server may take to start and list its tools and resources."""


class _ConnectionLost(Exception):
    """The connection to the server is gone: the server died, or the connection was closed."""


class McpServer:
    """One MCP server of a task: `start()` it, read its `tools` and `resources`, `call_tool`, `aclose()`.

    `log_path` receives a stdio server's stderr (by default a temporary file); its last lines end the
    error messages about the server.
    """

    def __init__(self, spec: McpServerSpec, log_path: Path | None = None):
        self.spec = spec
        self.label = spec.label
        self.failures = 0
        """How many times the server died (it is restarted after the first)."""
        self._errlog: IO[str] = open(log_path, "a") if log_path else tempfile.TemporaryFile("w+")  # noqa: SIM115
        self._connection: _Connection | None = None
        self._restarting: asyncio.Task | None = None
        self._dead: str | None = None

    @property
    def tools(self) -> list[types.Tool]:
        """The server's tools, as it listed them when it started."""
        return self._connection.tools if self._connection else []

    @property
    def resources(self) -> list[types.Resource]:
        """The server's resources, as it listed them when it started (none if it has no resources)."""
        return self._connection.resources if self._connection else []

    async def start(self) -> None:
        """Start the server and list its tools; McpServerDied (an AutoRLError, one line) if it does not
        come up."""
        server_environment(self.spec)  # a variable `pass_env` names is missing: one line, before any start
        self._connection = await self._connect(f"MCP server {self.label!r} did not start")

    async def _connect(self, failure: str) -> _Connection:
        connection = _Connection(self.spec, self._errlog)
        try:
            await connection.open(START_TIMEOUT_S)
        except Exception as exc:
            raise McpServerDied(f"{failure}: {_why(exc)}{self._stderr_tail()}") from None
        return connection

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        """Call tool `name`: (True, its result text), or (False, an error text for the model).

        Raises McpServerDied when the server died a second time. Cancelling the caller cancels the call.
        """
        await self.ready()
        connection = self._connection
        assert connection is not None, "McpServer.start() first"
        try:
            result = await connection.call(name, arguments)
        except _ConnectionLost:
            self._restart(connection)
            return False, _stopped(name)
        except MCPError as exc:
            return False, f"error: {exc.message}"
        text = result_text(result)
        return (False, f"error: {text}") if result.is_error else (True, text)

    async def lost_during_call(self, name: str) -> str | None:
        """After a call of tool `name` ran past its deadline: None when the server answers a ping (the tool was
        slow), else the error text of a server that stopped during the call (restarted as when a call finds it
        dead; McpServerDied at its second death). The ping waits until the server answers or its connection is
        found closed, up to `START_TIMEOUT_S` (a server that does neither is taken as alive)."""
        connection = self._connection
        if connection is None or await connection.answers_ping(START_TIMEOUT_S):
            return None
        self._restart(connection)
        return _stopped(name)

    async def ready(self) -> None:
        """Wait for a restart in progress; McpServerDied if the server is gone for good."""
        if self._restarting is not None and not self._restarting.done():
            await asyncio.shield(self._restarting)  # a caller's timeout does not interrupt the restart
        if self._dead:
            raise McpServerDied(self._dead)

    def _restart(self, connection: _Connection) -> None:
        """Start replacing a dead connection, once per death; McpServerDied at the second death."""
        if self._dead:
            raise McpServerDied(self._dead)
        if self._connection is not connection or (self._restarting is not None and not self._restarting.done()):
            return  # another call saw this death first
        self.failures += 1
        if self.failures >= 2:
            self._dead = f"MCP server {self.label!r} died again after it was restarted{self._stderr_tail()}"
            raise McpServerDied(self._dead)
        log.warning("MCP server %r died; restarting it%s", self.label, self._stderr_tail())
        self._restarting = asyncio.get_running_loop().create_task(self._replace(connection))
        self._restarting.add_done_callback(lambda task: task.cancelled() or task.exception())

    async def _replace(self, connection: _Connection) -> None:
        await connection.close()
        try:
            self._connection = await self._connect(f"MCP server {self.label!r} died and did not restart")
        except McpServerDied as exc:
            self._dead = str(exc)
            raise

    async def aclose(self) -> None:
        """Stop the server (a stdio server's process is gone when this returns)."""
        if self._restarting is not None:
            await asyncio.wait([self._restarting])
        if self._connection is not None:
            await self._connection.close()
        self._errlog.close()

    def _stderr_tail(self, limit: int = 300) -> str:
        """'; its stderr ends: ...' with the last lines the server wrote, or ''."""
        try:
            fd = self._errlog.fileno()
            size = os.fstat(fd).st_size
            text = os.pread(fd, 4096, max(0, size - 4096)).decode(errors="replace")
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()][-3:]
        tail = " / ".join(lines)
        return f"; its stderr ends: {tail[-limit:]}" if tail else ""


class _Connection:
    """One start of a server: the task that owns its `mcp` client, and the queue of its calls."""

    def __init__(self, spec: McpServerSpec, errlog: IO[str]):
        self.spec = spec
        self.errlog = errlog
        self.tools: list[types.Tool] = []
        self.resources: list[types.Resource] = []
        self._send, self._receive = anyio.create_memory_object_stream(math.inf)
        self._ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._owner: asyncio.Task | None = None

    async def open(self, timeout_s: float) -> None:
        self._owner = asyncio.get_running_loop().create_task(self._own(), name=f"MCP server {self.spec.label}")
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._ready)
        except BaseException:
            await self.close()
            raise

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self._request(lambda session: session.call_tool(name, arguments))

    async def answers_ping(self, timeout_s: float) -> bool:
        """Whether the server answers an MCP ping (False once the connection is found closed; True when neither
        happens within `timeout_s`, or the server answers with an error: it is there)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._request(lambda session: session.send_ping())
        except _ConnectionLost:
            return False
        except (MCPError, TimeoutError):
            return True
        return True

    async def _request(self, send: Callable[[ClientSession], Awaitable[Any]]) -> Any:
        """`send(session)` run by the owner task; its answer, or `_ConnectionLost`."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            self._send.send_nowait((send, future))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise _ConnectionLost("the connection is closed") from None
        return await future  # cancelling the caller cancels the future, which cancels the request

    async def close(self) -> None:
        self._send.close()
        if self._owner is None:
            return
        if not self._ready.done():
            self._owner.cancel()  # still starting: nothing reads the queue yet
        await asyncio.wait([self._owner])
        if not self._ready.cancelled():
            self._ready.exception()  # retrieved: a failed start is reported by `open`

    def _transport(self) -> contextlib.AbstractAsyncContextManager:
        if self.spec.url is not None:
            return streamable_http_client(self.spec.url)
        command = list(self.spec.command or [])
        if command[0] in ("python", "python3"):
            command[0] = sys.executable
        executable, *args = wrapped(command)
        parameters = StdioServerParameters(
            command=executable, args=args, env=server_environment(self.spec), cwd=self.spec.cwd
        )
        return stdio_client(parameters, errlog=self.errlog)

    async def _own(self) -> None:
        """The owner task: enter the client, list, serve calls until closed, leave the client."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                capabilities = session.server_capabilities
                if capabilities is None or capabilities.tools is not None:
                    self.tools = await _listed(session.list_tools, "tools")
                if capabilities is not None and capabilities.resources is not None:
                    with contextlib.suppress(MCPError):  # resources only describe the tools; do without
                        self.resources = await _listed(session.list_resources, "resources")
                self._ready.set_result(None)
                async with anyio.create_task_group() as group:
                    async for send, future in self._receive:
                        group.start_soon(_serve, session, send, future)
                    group.cancel_scope.cancel()  # closing: calls still running are abandoned
        except Exception as exc:
            log.debug("MCP server %r: connection ended: %r", self.spec.label, exc)
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            if not self._ready.done():
                self._ready.set_exception(_ConnectionLost("closed while starting"))
            self._receive.close()  # later calls fail at once; queued ones are answered below
            with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError, anyio.EndOfStream):
                while True:
                    _, future = self._receive.receive_nowait()
                    _settle(future, _ConnectionLost("the connection is closed"))


async def _serve(
    session: ClientSession, send: Callable[[ClientSession], Awaitable[Any]], future: asyncio.Future
) -> None:
    """One request (`call_tool`, `send_ping`), run in the owner's task group; its outcome goes to `future`."""
    try:
        with anyio.CancelScope() as scope:
            future.add_done_callback(lambda _: scope.cancel())  # the caller gave up
            result = await send(session)
        if not scope.cancelled_caught:
            _settle(future, result)
    except MCPError as exc:
        _settle(future, _ConnectionLost(exc.message) if exc.code == types.CONNECTION_CLOSED else exc)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        _settle(future, _ConnectionLost(repr(exc)))
    except Exception as exc:
        _settle(future, MCPError(types.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
    finally:
        _settle(future, _ConnectionLost("the connection was closed during the call"))


def _stopped(name: str) -> str:
    """What the model sees of a call whose server stopped during it."""
    return f"error: the server of tool {name!r} stopped during the call; it is being restarted"


def _settle(future: asyncio.Future, outcome: Any) -> None:
    if not future.done():
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


async def _listed(method: Callable[..., Awaitable[Any]], field: str) -> list:
    """Every page of a `list_tools` / `list_resources` answer."""
    items, cursor = [], None
    while True:
        page = await method(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            return items


def server_environment(spec: McpServerSpec) -> dict[str, str]:
    """A stdio server's environment: the MCP SDK's minimal one (`get_default_environment`: HOME, PATH, SHELL,
    TERM, USER, LOGNAME), the variables of autorl's environment that `spec.pass_env` names, then `spec.env`;
    nothing else of autorl's (its API keys among it). A `pass_env` name that is not set is an error."""
    missing = [name for name in spec.pass_env if name not in os.environ]
    if missing:
        raise McpServerDied(
            f"MCP server {spec.label!r}: pass_env names {', '.join(missing)}, not set in autorl's environment"
        )
    return {**get_default_environment(), **{name: os.environ[name] for name in spec.pass_env}, **spec.env}


def result_text(result: types.CallToolResult) -> str:
    """A tool result as the text the model sees: its text contents joined by newlines (other contents
    named by type, e.g. `[image]`), or its structured content as JSON when it has no content."""
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if text is None:
            text = getattr(getattr(block, "resource", None), "text", None)
        parts.append(text if text is not None else f"[{block.type}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _why(exc: BaseException) -> str:
    """The innermost meaningful error of `exc` (anyio wraps errors in exception groups), as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no answer within {START_TIMEOUT_S:g} s"
    if isinstance(exc, MCPError):
        return exc.message
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")
