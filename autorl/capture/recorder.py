"""The capture scopes' stack and the httpx hooks that record into its innermost trajectory (clients.py: aiohttp's
and requests').

A scope is a `Trajectory` pushed on a context variable, so it follows the rollout's own task (and the tasks and
threads it starts with a copy of its context) and concurrent rollouts never see each other's scope. The first
scope entered patches `send` of httpx's `Client` and `AsyncClient` (both `httpx` and `httpx2`, which the OpenAI
SDK uses); the patched send passes every request on unchanged and, while a scope is active, reads the request and
response of a chat completion, a completion, a Responses call or an Anthropic Messages call (apis.py reads each as
chat): an answer is recorded once read, a stream once the agent has read it to its end or closed it (the stream's
bytes reach the agent as they arrive; a copy is kept beside them). A request made while another is being sent (a transport that sends through a client of its own) is not recorded twice.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import httpx

from .apis import captured_choice, captured_request

try:  # the OpenAI SDK's own httpx (3.x); absent with older SDKs
    import httpx2
except ImportError:  # pragma: no cover - depends on the installed OpenAI SDK
    httpx2 = None

if TYPE_CHECKING:
    from ..trajectories import Trajectory

log = logging.getLogger("autorl")
HTTPX_MODULES: tuple[ModuleType, ...] = tuple(m for m in (httpx, httpx2) if m is not None)
"""The httpx packages whose clients a scope records (patched once, on the first scope entered)."""
_PATCHED = "_autorl_capture"

_scopes: contextvars.ContextVar[tuple[Trajectory, ...]] = contextvars.ContextVar("autorl_capture", default=())
_sending: contextvars.ContextVar[bool] = contextvars.ContextVar("autorl_capture_sending", default=False)
_lock = threading.Lock()


def current() -> Trajectory | None:
    """The innermost active scope's trajectory, or None."""
    scopes = _scopes.get()
    return scopes[-1] if scopes else None


def push(trajectory: Trajectory) -> contextvars.Token:
    """Makes `trajectory` the innermost scope (patching httpx on first use); `pop` ends it."""
    install()
    return _scopes.set((*_scopes.get(), trajectory))


def pop(trajectory: Trajectory, token: contextvars.Token) -> None:
    """Ends the scope `push` began; scopes end innermost first."""
    if current() is not trajectory:
        raise RuntimeError("capture scopes must end innermost first")
    _scopes.reset(token)


def hide() -> contextvars.Token:
    """No scope is active until `_scopes.reset(token)` (`no_capture`); new scopes may still begin inside."""
    return _scopes.set(())


def unhide(token: contextvars.Token) -> None:
    _scopes.reset(token)


@dataclass
class Call:
    """One chat completion being recorded: its scope, request, and the response bytes read so far."""

    trajectory: Trajectory
    request: dict[str, Any]
    headers: Any = None
    body: bytearray = field(default_factory=bytearray)
    done: bool = False

    def finish(self, status: int, body: bytes | None = None, module: ModuleType | None = None) -> None:
        """Records the completion into its trajectory (once; nothing for an error status or no choice): `body`, else
        the bytes read so far (`self.body`), which an httpx `module` decodes as their Content-Encoding says."""
        if self.done:
            return
        self.done = True
        if not 200 <= status < 300:
            return
        if body is None:
            body = bytes(self.body)
            if module is not None:  # a stream's raw bytes
                body = module.Response(status, headers=self.headers, content=body).content
        choice = captured_choice(body, self.request)
        if choice is None:
            log.debug("a chat completion inside a capture scope had no choice to record")
            return
        with _lock:
            self.trajectory.add_completion(self.request["messages"], self.request.get("tools"), choice)


def begin(method: str, path: str, content: Callable[[], bytes | None]) -> Call | None:
    """The call to record for a request (`content()` its body, read only when a scope is active), or None: no scope,
    another request, or a request made inside an httpx send (a transport over another client, recorded once)."""
    trajectory = current()
    if trajectory is None or _sending.get():
        return None
    raw = content()
    body = None if raw is None else captured_request(method, path, raw)
    return None if body is None else Call(trajectory, body)


def _begin(module: ModuleType, request: Any) -> Call | None:
    """`begin` for an httpx request."""

    def content() -> bytes | None:
        try:
            return request.content
        except module.RequestNotRead:  # a streamed upload: not a chat completion the SDKs send
            return None

    return begin(request.method, request.url.path, content)


def _sync_tee(module: ModuleType) -> type:
    class SyncTee(module.SyncByteStream):
        """A response stream read through: each chunk reaches the reader and the call's copy."""

        def __init__(self, inner: Any, call: Call, status: int):
            self.inner, self.call, self.status = inner, call, status

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.inner:
                self.call.body.extend(chunk)
                yield chunk
            self.call.finish(self.status, module=module)

        def close(self) -> None:
            self.inner.close()
            self.call.finish(self.status, module=module)

    return SyncTee


def _async_tee(module: ModuleType) -> type:
    class AsyncTee(module.AsyncByteStream):
        """The async `SyncTee`."""

        def __init__(self, inner: Any, call: Call, status: int):
            self.inner, self.call, self.status = inner, call, status

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                self.call.body.extend(chunk)
                yield chunk
            self.call.finish(self.status, module=module)

        async def aclose(self) -> None:
            await self.inner.aclose()
            self.call.finish(self.status, module=module)

    return AsyncTee


def _received(module: ModuleType, call: Call, response: Any, stream: bool, tee: type) -> None:
    """Starts recording `response`: now if it was read (`stream=False`), else as its stream is read."""
    if not stream:
        call.finish(response.status_code, response.content)
        return
    call.headers = response.headers
    response.stream = tee(response.stream, call, response.status_code)


def _patch(module: ModuleType) -> None:
    sync_send, async_send = module.Client.send, module.AsyncClient.send
    sync_tee, async_tee = _sync_tee(module), _async_tee(module)

    def send(self: Any, request: Any, **kwargs: Any) -> Any:
        call = _begin(module, request)
        token = _sending.set(True)
        try:
            response = sync_send(self, request, **kwargs)
        finally:
            _sending.reset(token)
        if call is not None:
            _received(module, call, response, kwargs.get("stream", False), sync_tee)
        return response

    async def asend(self: Any, request: Any, **kwargs: Any) -> Any:
        call = _begin(module, request)
        token = _sending.set(True)
        try:
            response = await async_send(self, request, **kwargs)
        finally:
            _sending.reset(token)
        if call is not None:
            _received(module, call, response, kwargs.get("stream", False), async_tee)
        return response

    setattr(send, _PATCHED, True)
    setattr(asend, _PATCHED, True)
    module.Client.send = send
    module.AsyncClient.send = asend


def install() -> None:
    """Patches the clients of every httpx package, and aiohttp's and requests' where installed, once (idempotent,
    thread-safe)."""
    from . import clients  # aiohttp and requests: optional, and imported only once a scope begins (slow to import)

    with _lock:
        for module in HTTPX_MODULES:
            if not getattr(module.Client.send, _PATCHED, False):
                _patch(module)
        clients.install()
