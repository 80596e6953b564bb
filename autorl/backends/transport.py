"""How a trainable model's OpenAI clients reach its servers: held back while it trains (`InferenceGate`), and
sent again when a server died under a request and was recovered (`GatedTransport`).

A backend owns one gate per registered model and hands the model's clients a `GatedTransport` over it
(`Backend.transport`); the model itself never touches the gate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

RECOVERY_RETRIES = 2
"""Times one request is sent again after its server was found dead and recovered."""
CUT_OFF = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)
"""What a request to a server that died raises: it is sent again once the server is back (or, on a cluster, to
another replica)."""
ENGINE_DIED = b"EngineCore encountered an issue"
"""What vLLM answers (HTTP 500) to the requests it holds when its engine process died (killed, as the OOM killer
does, or stopped with the server's process group): the server is going away, so such a request counts as cut off."""


class InferenceGate:
    """Holds back requests to a model while a training step runs."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    @contextlib.asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        """Closed for the body of the `async with`, open again after it, however it ends."""
        self.close()
        try:
            yield
        finally:
            self.open()

    async def wait(self) -> None:
        await self._open.wait()


async def unless_engine_died(response: httpx.Response, request: httpx.Request) -> httpx.Response:
    """`response` as it is, or read whole if it is a 500 (an error body is small); raises `httpx.RemoteProtocolError`
    (one of `CUT_OFF`) when that 500 says the server's engine died (`ENGINE_DIED`)."""
    if response.status_code != 500:
        return response
    response = httpx.Response(500, headers=response.headers, content=await response.aread())
    if ENGINE_DIED in response.content:
        raise httpx.RemoteProtocolError("the vLLM server's engine died", request=request)
    return response


class GatedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that waits for the gate before each request, and sends a request again when it
    could not reach the server, was cut off or was told the server's engine died (`CUT_OFF`, `ENGINE_DIED`) and
    `recover` brought the server back (returns True; None: nothing recovers, the error goes to the caller).
    `inner` sends the requests (None: plain HTTP)."""

    def __init__(
        self,
        gate: InferenceGate,
        recover: Callable[[], Awaitable[bool]] | None = None,
        inner: httpx.AsyncBaseTransport | None = None,
    ):
        self._gate = gate
        self._recover = recover
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        retries = 0
        while True:
            await self._gate.wait()
            try:
                return await unless_engine_died(await self._inner.handle_async_request(request), request)
            except CUT_OFF:
                retries += 1
                if retries > RECOVERY_RETRIES or self._recover is None or not await self._recover():
                    raise

    async def aclose(self) -> None:
        await self._inner.aclose()
