"""An OpenAI-compatible address on this machine (`http://127.0.0.1:PORT/v1`) in front of an httpx transport.

A cluster's policy clients route through `autorl.backends.cluster.routing.RoutingTransport` directly; LiteLLM (RULER's
judge, the input generator) takes a URL, not a transport, so for it `PoolProxy` serves one: each request
is sent on through the transport (for a `ReplicaPool`: least-outstanding choice, resent to another replica if
one dies) and its answer, streamed or not, is passed back as it comes. The proxy runs its own event loop in a
thread, and the pool lives in that loop, so any thread may use the address, blocking callers included (the
generator's calls from a worker thread while the run's loop waits on it). Like every server autorl starts, it
requires its own key (`api_key`; `autorl.serving.auth`) on every route but /health, decided on the route it
would forward (never on the client's spelling of the path), and never passes it on: the
transport sends each replica's own. It passes on `PROXIED_ROUTES` only, as `autorl serve` does: the
replicas' LoRA loading and development endpoints stay out of reach of whoever holds the proxy's key.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx

from ...errors import ServerDiedError
from ...serving.auth import OPEN_PATHS, authorized, new_key
from ...serving.routes import INFERENCE_ROUTES, allowed_route

T = TypeVar("T")

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "trailer", "upgrade"}
)
"""Headers of one HTTP hop: not passed on (the proxy's own connection sets them)."""
NOT_FORWARDED = HOP_BY_HOP | {"authorization"}
"""Headers of a request not sent on: the hop's, and the proxy's key."""
PROXIED_ROUTES = {**INFERENCE_ROUTES, **{path: frozenset({"GET"}) for path in OPEN_PATHS}}
"""What the proxy passes on: OpenAI inference (`autorl.serving.routes`) and the replicas' health check; any
other path is 404 before a replica sees it."""
CLOSE_TIMEOUT_S = 30.0
"""How long `close` waits for the proxy's loop to cancel what it runs."""


class PoolProxy:
    """Serves a transport at a local address; `run` runs a coroutine in the proxy's loop (where a pool's
    replicas are started, published and recovered), `serve` opens the address, `close` ends it all."""

    def __init__(self, name: str = "autorl-pool-proxy"):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._client: httpx.AsyncClient | None = None
        self._runner: Any = None
        self.base_url = ""
        """The OpenAI-compatible endpoint (`http://127.0.0.1:PORT/v1`), once `serve` opened it."""
        self.api_key = new_key()
        """The key every request but /health must carry (`Authorization: Bearer ...`)."""

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` in the proxy's loop and return its result (blocking: not from the proxy's loop)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def serve(self, transport: httpx.AsyncBaseTransport, upstream: str) -> str:
        """Open the address (run this with `run`): each request goes to `upstream` (scheme and host, e.g. a
        `RoutingTransport`'s virtual host) through `transport`; one without the proxy's key is answered 401, one
        that raises `ServerDiedError` (no replica left) 503, another transport error 502. Returns `base_url`."""
        from aiohttp import web

        self._client = httpx.AsyncClient(transport=transport, base_url=upstream, timeout=None)
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self.base_url

    async def _forward(self, request: Any) -> Any:
        from aiohttp import web

        route = allowed_route(request.method, request.raw_path, PROXIED_ROUTES)
        if route not in OPEN_PATHS and not authorized(request.headers.get("Authorization"), self.api_key):
            return web.json_response({"error": "Unauthorized: this proxy needs its key"}, status=401)
        if route is None:
            return web.json_response({"error": "Not found: this proxy passes on OpenAI inference only"}, status=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED}
        upstream = self._client.build_request(request.method, route, headers=headers, content=await request.read())
        try:
            response = await self._client.send(upstream, stream=True)
        except ServerDiedError as exc:
            return web.Response(status=503, text=str(exc))
        except httpx.HTTPError as exc:
            return web.Response(status=502, text=f"{type(exc).__name__}: {exc}")
        try:
            answer = web.StreamResponse(
                status=response.status_code,
                headers={k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP},
            )
            await answer.prepare(request)
            async for chunk in response.aiter_raw():
                await answer.write(chunk)
            await answer.write_eof()
            return answer
        finally:
            await response.aclose()

    def close(self) -> None:
        """Cancel what runs in the proxy's loop (replica starts, recoveries, requests), close the address,
        end the thread. Idempotent."""
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(CLOSE_TIMEOUT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_TIMEOUT_S)
            if not self._thread.is_alive():
                self._loop.close()

    async def _shutdown(self) -> None:
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.aclose()
