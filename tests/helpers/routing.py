"""Chat-completion servers on 127.0.0.1 that a replica pool routes to (delayed, gated, failing with a status) and
the pool's Ray calls faked: what the routing tests and the pool proxy's security test share. The `serve` and
`proxied` fixtures are registered in conftest.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from autorl.backends.cluster.backend import VIRTUAL_HOST
from autorl.backends.cluster.proxy import PoolProxy
from autorl.backends.cluster.routing import Replica, ReplicaPool, RoutingTransport
from tests.helpers.chat_server import ChatCompletionServer

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


class Status(Exception):
    """Raised by an answer function: its server answers with this HTTP status."""

    def __init__(self, code: int, explain: str | None = None):
        super().__init__(code)
        self.code = code
        self.explain = explain


class Server(ChatCompletionServer):
    """A `ChatCompletionServer` that also keeps each request's path and headers in `seen`, and answers with an
    error status when its answer function raises `Status`."""

    def __init__(self, answer: Callable[[dict], dict]):
        super().__init__(answer)
        self.seen: list[tuple[str, dict[str, str]]] = []
        seen, handler = self.seen, self.httpd.RequestHandlerClass

        class Handler(handler):
            def do_POST(self) -> None:
                seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                try:
                    super().do_POST()
                except Status as status:
                    self.send_error(status.code, explain=status.explain)

        self.httpd.RequestHandlerClass = Handler

    @property
    def url(self) -> str:
        """What a replica's `url` holds: the base URL without /v1."""
        return self.base_url.removesuffix("/v1")


def completion(body: dict) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    }


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Starts a server that answers after `delay` s (and once `gate` is set), with `status` if given (its body
    saying `explain`)."""
    made: list[Server] = []

    def start(
        delay: float = 0.0, gate: threading.Event | None = None, status: int | None = None, explain: str | None = None
    ) -> Server:
        def answer(body: dict) -> dict:
            time.sleep(delay)
            if gate is not None:
                gate.wait(10)
            if status is not None:
                raise Status(status, explain)
            return completion(body)

        made.append(Server(answer))
        return made[-1]

    yield start
    with ThreadPoolExecutor() as closing:  # each close waits up to 0.5 s for its server's loop to notice
        list(closing.map(Server.close, made))


class Actors:
    """The pool's Ray calls, faked, each recorded in `calls`: `load` waits for `hold_load[replica]` if set;
    `restart` waits for `hold_restart` if set, then raises if `broken`, else starts a fresh server (in `fresh`)."""

    def __init__(self, serve: Callable[..., Server]):
        self.calls: list[tuple] = []
        self.hold_load: dict[int, asyncio.Event] = {}
        self.hold_restart: asyncio.Event | None = None
        self.broken = False
        self.fresh: dict[int, Server] = {}
        self._serve = serve

    async def load(self, replica: Replica, step: int) -> None:
        self.calls.append(("load", replica.index, step))
        if replica.index in self.hold_load:
            await self.hold_load[replica.index].wait()

    async def restart(self, replica: Replica) -> str:
        self.calls.append(("restart", replica.index))
        if self.hold_restart is not None:
            await self.hold_restart.wait()
        if self.broken:
            raise RuntimeError("the actor died")
        self.fresh[replica.index] = self._serve()
        replica.key = f"restarted-key-{replica.index}"  # as ClusterPlacement.restart sets the new server's key
        return self.fresh[replica.index].url

    def restarts(self) -> list[tuple]:
        return [call for call in self.calls if call[0] == "restart"]


async def ready_pool(servers: list[Server], actors: Actors, max_restarts: int = 3, step: int = 1) -> ReplicaPool:
    """A pool of one replica per server, all serving `step`, each with its own key; `actors` forgets the loads
    this took."""
    replicas = [Replica(index, url=server.url, key=f"replica-key-{index}") for index, server in enumerate(servers)]
    pool = ReplicaPool(replicas, load=actors.load, restart=actors.restart, max_restarts=max_restarts, name="m")
    await pool.publish(step)
    actors.calls.clear()
    return pool


@pytest.fixture
def proxied(serve) -> Iterator[Callable[..., tuple[PoolProxy, ReplicaPool, Actors]]]:
    """Serves a pool of one replica per server at a `PoolProxy`'s address (the pool lives in the proxy's loop)."""
    proxies: list[PoolProxy] = []

    def start(servers: list[Server], max_restarts: int = 3) -> tuple[PoolProxy, ReplicaPool, Actors]:
        proxies.append(PoolProxy())
        actors = Actors(serve)
        pool = proxies[-1].run(ready_pool(servers, actors, max_restarts=max_restarts))
        proxies[-1].run(proxies[-1].serve(RoutingTransport(pool, wait_s=10.0), f"http://{VIRTUAL_HOST}"))
        return proxies[-1], pool, actors

    yield start
    for proxy in proxies:
        proxy.close()
