"""Which replica answers a request: `ReplicaPool` (the replicas of one model, the step they must serve, the
choice per request) and `RoutingTransport` (the httpx transport that sends each request to the replica the
pool picks, and again to another one if it died).

No Ray here: the pool's only I/O is two callables, so the simulation in benchmarks/perf/replica_simulation.py
and the unit tests drive these same classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from ...errors import ServerDiedError
from ..transport import CUT_OFF, RECOVERY_RETRIES, unless_engine_died

log = logging.getLogger("autorl")

ReplicaState = Literal["starting", "ready", "recovering", "dead"]


@dataclass(eq=False)
class Replica:
    """What the driver knows of one replica."""

    index: int
    handle: Any = None
    """The Ray actor (None in tests and the simulation)."""
    url: str = ""
    """Base URL of its server, without /v1."""
    key: str = ""
    """Its server's key (`autorl.serving.auth`), sent with every request routed to it in place of the
    client's; empty: the client's Authorization header goes through as it is."""
    state: ReplicaState = "starting"
    served_step: int = -1
    """The checkpoint step its server holds (0: the base model; -1: none yet)."""
    outstanding: int = 0
    """Requests sent to it and not yet answered in full."""
    restarts: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while its checkpoint changes or it restarts, so those never overlap."""


class ReplicaPool:
    """The replicas of one model, the step they must serve, and the choice of a replica per request.

    `pick` takes a replica that is ready and serves `step`, the one with the fewest requests outstanding
    (ties in turn), so no request reaches a stale checkpoint and the load spreads evenly; `failed` takes a
    replica out of the choice and recovers it in the background: `restart(replica)` (returns its new URL)
    then `load(replica, step)`. The two callables are the only I/O, so the simulation in
    benchmarks/perf/replica_simulation.py drives this same class.
    """

    def __init__(
        self,
        replicas: list[Replica],
        load: Callable[[Replica, int], Awaitable[None]],
        restart: Callable[[Replica], Awaitable[str]],
        max_restarts: int = 3,
        name: str = "model",
    ):
        self.replicas = replicas
        self.step = -1
        """The step every request must be answered by (set by `publish`)."""
        self._load = load
        self._restart = restart
        self.max_restarts = max_restarts
        self.name = name
        self._turn = itertools.count()
        self._changed = asyncio.Event()
        self._recoveries: set[asyncio.Task] = set()

    def pick(self) -> Replica | None:
        """The ready, up-to-date replica with the fewest outstanding requests (counted as sent), or None."""
        ready = [r for r in self.replicas if r.state == "ready" and r.served_step == self.step]
        if not ready:
            return None
        turn = next(self._turn)
        least = min(r.outstanding for r in ready)
        tied = [r for r in ready if r.outstanding == least]
        chosen = tied[turn % len(tied)]
        chosen.outstanding += 1
        return chosen

    def release(self, replica: Replica) -> None:
        replica.outstanding -= 1

    async def acquire(self, timeout: float) -> Replica:
        """A replica to send one request to (`pick`), waiting up to `timeout` s for one to become ready."""
        deadline = asyncio.get_running_loop().time() + timeout
        while (chosen := self.pick()) is None:
            if all(r.state == "dead" for r in self.replicas):
                raise ServerDiedError(f"every vLLM replica of {self.name!r} died more than {self.max_restarts} times")
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise ServerDiedError(f"no vLLM replica of {self.name!r} became ready within {timeout:.0f} s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return chosen

    def _notify(self) -> None:
        self._changed.set()

    async def publish(self, step: int) -> None:
        """Make `step` the one served: from now on only replicas serving it are picked; returns once every
        live replica loaded it (one that fails to is recovered in the background) and one serves it."""
        self.step = step
        live = [r for r in self.replicas if r.state in ("ready", "starting")]
        await asyncio.gather(*(self._catch_up_or_recover(r) for r in live))
        while not any(r.state == "ready" and r.served_step == step for r in self.replicas):
            if all(r.state == "dead" for r in self.replicas):
                raise ServerDiedError(f"every vLLM replica of {self.name!r} died more than {self.max_restarts} times")
            self._changed.clear()
            await self._changed.wait()

    async def _catch_up(self, replica: Replica) -> None:
        """Load the current step into `replica` (again if `publish` moved on meanwhile), then route to it."""
        async with replica.lock:
            while replica.served_step != self.step:
                step = self.step
                await self._load(replica, step)
                replica.served_step = step
            replica.state = "ready"
        self._notify()

    async def _catch_up_or_recover(self, replica: Replica) -> None:
        try:
            await self._catch_up(replica)
        except Exception as exc:  # a replica that cannot load is restarted like a dead one
            self.failed(replica, f"loading step {self.step} failed: {type(exc).__name__}: {exc}")

    def failed(self, replica: Replica, reason: str, restarts: int | None = None) -> None:
        """Take `replica` out of routing and restart it in the background (once, however many requests saw it
        fail). `restarts`: its count when the failed request was sent; a failure seen by a request sent before
        a restart is the old server's, and is ignored."""
        if replica.state in ("recovering", "dead") or restarts not in (None, replica.restarts):
            return
        replica.state = "recovering"
        task = asyncio.get_running_loop().create_task(self._recover(replica, reason))
        self._recoveries.add(task)
        task.add_done_callback(self._recoveries.discard)

    async def _recover(self, replica: Replica, reason: str) -> None:
        """Restart `replica` and load the current step into it, up to `max_restarts` times in all; then it is dead."""
        while replica.restarts < self.max_restarts:
            replica.restarts += 1
            log.warning(
                "replica %d of %r died (%s); restarting it (%d of at most %d)",
                replica.index, self.name, reason, replica.restarts, self.max_restarts,
            )  # fmt: skip
            try:
                async with replica.lock:
                    replica.url = await self._restart(replica)
                    replica.served_step = -1
                await self._catch_up(replica)
                log.warning("replica %d of %r is back, serving step %d", replica.index, self.name, self.step)
                return
            except Exception as exc:  # tried again, up to max_restarts
                reason = f"{type(exc).__name__}: {exc}"
        replica.state = "dead"
        log.warning("replica %d of %r is out of the run (%s); the others go on", replica.index, self.name, reason)
        self._notify()

    def cancel_recoveries(self) -> None:
        """Stop the restarts under way (the run is ending)."""
        for task in self._recoveries:
            task.cancel()


class _Released(httpx.AsyncByteStream):
    """A response body that gives its replica's request slot back when it is closed (read in full or not)."""

    def __init__(self, stream: httpx.AsyncByteStream, release: Callable[[], None]):
        self._stream = stream
        self._release = release

    async def __aiter__(self):
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            release, self._release = self._release, lambda: None
            release()


class RoutingTransport(httpx.AsyncBaseTransport):
    """Sends each request to a replica the pool picks, with that replica's key, and again to another one if the
    first was unreachable, cut off, or answered that its engine died (the pool restarts that one); other errors
    and HTTP statuses go back to the caller as they are."""

    def __init__(self, pool: ReplicaPool, wait_s: float = 600.0):
        self._pool = pool
        self._wait_s = wait_s
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        sent = [(k, v) for k, v in request.headers.raw if k.lower() != b"host"]
        unkeyed = [(k, v) for k, v in sent if k.lower() != b"authorization"]
        attempts = RECOVERY_RETRIES + len(self._pool.replicas)
        for attempt in range(1, attempts + 1):
            replica = await self._pool.acquire(self._wait_s)
            restarts = replica.restarts  # which of its servers this request reaches
            try:
                target = httpx.URL(replica.url)
                url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
                headers = [*unkeyed, (b"Authorization", f"Bearer {replica.key}".encode())] if replica.key else sent
                routed = httpx.Request(
                    request.method, url, headers=headers, content=body, extensions=request.extensions
                )
                response = await unless_engine_died(await self._inner.handle_async_request(routed), routed)
            except CUT_OFF as exc:
                self._pool.release(replica)
                self._pool.failed(replica, f"{type(exc).__name__} ({exc}) on {request.url.path}", restarts)
                if attempt == attempts:
                    raise
                continue
            except BaseException:
                self._pool.release(replica)
                raise
            stream = _Released(response.stream, lambda r=replica: self._pool.release(r))
            return httpx.Response(
                response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
            )
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self._inner.aclose()
