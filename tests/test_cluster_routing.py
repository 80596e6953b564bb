"""`ReplicaPool` and `RoutingTransport` (autorl/backends/cluster/routing.py): how a cluster model's requests reach its replicas.

Each fake replica is a real HTTP server on 127.0.0.1 (`ChatCompletionServer`), and requests go to it over real
HTTP through `RoutingTransport`; the only fakes are the pool's two Ray calls, `load(replica, step)` and
`restart(replica)` (`Actors`). Tested: least-outstanding choice (even spread, a slow replica gets less), the
outstanding count given back however a response ends, a refused request sent again to another replica while the
dead one is restarted once and reloaded, no request to a replica behind the current step, `acquire` waiting
for a ready replica or failing with `ServerDiedError`, error statuses returned as they are (not retried), and
the request as the replica's server receives it (host, path, headers, body).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI

from autorl.backends.cluster.backend import VIRTUAL_HOST
from autorl.backends.cluster.proxy import PoolProxy
from autorl.backends.cluster.routing import Replica, ReplicaPool, RoutingTransport
from autorl.backends.transport import ENGINE_DIED
from autorl.errors import ServerDiedError
from tests.helpers.routing import CHAT, Actors, Server, ready_pool


def sync(test: Callable[..., Coroutine]) -> Callable[..., None]:
    """Runs an async test in its own event loop (the project has no pytest-asyncio)."""

    @functools.wraps(test)
    def run(*args, **kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def routed(pool: ReplicaPool, wait_s: float = 10.0) -> httpx.AsyncClient:
    """A client as a cluster model's: the virtual host, routed by the pool."""
    return httpx.AsyncClient(transport=RoutingTransport(pool, wait_s=wait_s), base_url=f"http://{VIRTUAL_HOST}/v1")


async def chat(http: httpx.AsyncClient) -> httpx.Response:
    return await http.post("/chat/completions", json=CHAT)


async def chats(http: httpx.AsyncClient, count: int) -> list[httpx.Response]:
    """`count` concurrent requests, each answered 200."""
    responses = await asyncio.gather(*(chat(http) for _ in range(count)))
    assert [r.status_code for r in responses] == [200] * count
    return responses


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def outstanding(pool: ReplicaPool) -> list[int]:
    return [replica.outstanding for replica in pool.replicas]


def received(servers: list[Server]) -> list[int]:
    return [len(server.requests) for server in servers]


# --- least outstanding ------------------------------------------------------------------------------------


@sync
async def test_concurrent_requests_spread_evenly(serve):
    gate = threading.Event()
    servers = [serve(gate=gate), serve(gate=gate)]
    pool = await ready_pool(servers, Actors(serve))
    async with routed(pool) as http:
        sent = asyncio.ensure_future(chats(http, 8))
        await until(lambda: sum(received(servers)) == 8)
        assert outstanding(pool) == [4, 4]
        gate.set()
        await sent
    assert received(servers) == [4, 4]
    assert outstanding(pool) == [0, 0]


@sync
async def test_a_slower_replica_gets_fewer_requests(serve):
    servers = [serve(delay=0.2), serve(delay=0.04)]  # the first answers 5x slower
    pool = await ready_pool(servers, Actors(serve))
    budget = iter(range(40))  # shared, so 4 requests stay in flight until the last ones

    async def client(http: httpx.AsyncClient) -> None:
        for _ in budget:
            assert (await chat(http)).status_code == 200

    async with routed(pool) as http:
        await asyncio.gather(*(client(http) for _ in range(4)))
    slow, fast = received(servers)
    assert slow + fast == 40
    assert 2 * slow < fast, (slow, fast)  # taking turns regardless of the count would split them 20/20


# --- the outstanding count --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "read"), [(200, True), (500, True), (200, False)], ids=["read", "error-status", "closed-unread"]
)
@sync
async def test_the_outstanding_count_is_given_back_when_a_response_ends(serve, status, read):
    pool = await ready_pool([serve(status=None if status == 200 else status)], Actors(serve))
    async with routed(pool) as http, http.stream("POST", "/chat/completions", json=CHAT) as response:
        assert response.status_code == status
        assert outstanding(pool) == [1]  # counted until the body is read or closed
        if read:
            await response.aread()
            assert outstanding(pool) == [0]
    assert outstanding(pool) == [0]


# --- a replica that died ----------------------------------------------------------------------------------


@sync
async def test_a_refused_request_goes_to_another_replica_while_the_dead_one_is_restarted_once(serve):
    servers = [serve(), serve()]
    actors = Actors(serve)
    pool = await ready_pool(servers, actors)
    actors.hold_restart = asyncio.Event()
    failures: list[int] = []  # the precondition: several requests saw replica 0 refuse them
    failed = pool.failed

    def spy(replica: Replica, reason: str, restarts: int | None = None) -> None:
        failures.append(replica.index)
        failed(replica, reason, restarts)

    pool.failed = spy
    servers[0].close()
    async with routed(pool) as http:
        await chats(http, 4)
        assert failures == [0, 0]
        assert received(servers)[1] == 4
        assert actors.restarts() == [("restart", 0)]
        dead = pool.replicas[0]
        assert dead.state == "recovering"

        actors.hold_restart.set()
        await until(lambda: dead.state == "ready")
        assert actors.calls == [("restart", 0), ("load", 0, pool.step)]
        assert dead.url == actors.fresh[0].url and dead.served_step == pool.step
        await chats(http, 2)  # routable again: least outstanding sends one of the two there
    assert received([actors.fresh[0], servers[1]]) == [1, 5]
    assert outstanding(pool) == [0, 0]


@sync
async def test_a_failure_a_request_saw_before_a_restart_leaves_the_restarted_server_alone(serve):
    actors = Actors(serve)
    pool = await ready_pool([serve(), serve()], actors)
    replica = pool.replicas[0]
    sent_at = replica.restarts  # two requests were sent to its first server
    pool.failed(replica, "refused", sent_at)
    await until(lambda: replica.state == "ready")
    pool.failed(replica, "cut off", sent_at)  # the second one's failure, seen after the restart
    assert replica.state == "ready" and actors.restarts() == [("restart", 0)]
    pool.failed(replica, "refused", replica.restarts)  # a failure of the new server
    assert replica.state == "recovering"
    pool.cancel_recoveries()


@sync
async def test_a_request_answered_that_the_engine_died_goes_to_another_replica(serve):
    servers = [serve(status=500, explain=ENGINE_DIED.decode()), serve()]  # vLLM's answer as its engine dies
    actors = Actors(serve)
    actors.hold_restart = asyncio.Event()
    pool = await ready_pool(servers, actors)
    async with routed(pool) as http:
        await chats(http, 2)
    assert received(servers) == [1, 2]
    assert actors.restarts() == [("restart", 0)] and pool.replicas[0].state == "recovering"
    pool.cancel_recoveries()


# --- freshness --------------------------------------------------------------------------------------------


@sync
async def test_a_replica_behind_the_current_step_is_never_picked(serve):
    servers = [serve(), serve()]
    actors = Actors(serve)
    pool = await ready_pool(servers, actors)
    actors.hold_load[0] = asyncio.Event()
    publish = asyncio.ensure_future(pool.publish(2))
    behind, current = pool.replicas
    await until(lambda: current.served_step == 2)
    async with routed(pool) as http:
        await chats(http, 4)
        assert received(servers) == [0, 4]  # replica 0 is ready, but still serves step 1
        assert not publish.done() and behind.served_step == 1
        actors.hold_load[0].set()
        await asyncio.wait_for(publish, 5)
        assert behind.served_step == 2 and behind.state == "ready"
        await chats(http, 2)
    assert received(servers) == [1, 5]


# --- waiting for a replica --------------------------------------------------------------------------------


async def pool_being_restarted(
    serve: Callable[..., Server], count: int, max_restarts: int = 3
) -> tuple[ReplicaPool, Actors]:
    """A pool of `count` replicas whose servers all died (nothing on their ports); restarts wait for
    `actors.hold_restart`."""
    servers = [serve() for _ in range(count)]
    actors = Actors(serve)
    pool = await ready_pool(servers, actors, max_restarts=max_restarts)
    actors.hold_restart = asyncio.Event()
    for server in servers:
        server.close()
    return pool, actors


@sync
async def test_a_request_waits_until_recovery_makes_a_replica_ready(serve):
    pool, actors = await pool_being_restarted(serve, 1)
    async with routed(pool) as http:
        request = asyncio.ensure_future(chat(http))
        await until(lambda: actors.restarts() == [("restart", 0)])
        await asyncio.sleep(0.3)
        assert not request.done()  # no replica ready: it waits
        actors.hold_restart.set()
        response = await asyncio.wait_for(request, 5)
    assert response.status_code == 200
    assert received([actors.fresh[0]]) == [1]


@sync
async def test_a_request_fails_when_every_replica_is_dead(serve):
    pool, actors = await pool_being_restarted(serve, 2, max_restarts=2)
    actors.hold_restart.set()
    actors.broken = True
    async with routed(pool) as http:
        with pytest.raises(ServerDiedError, match="every vLLM replica of 'm' died"):
            await asyncio.wait_for(chat(http), 5)
    assert sorted(actors.restarts()) == [("restart", 0)] * 2 + [("restart", 1)] * 2
    assert [r.state for r in pool.replicas] == ["dead", "dead"]


@sync
async def test_a_request_fails_when_no_replica_becomes_ready_in_time(serve):
    pool, _ = await pool_being_restarted(serve, 1)
    start = time.monotonic()
    async with routed(pool, wait_s=0.5) as http:
        with pytest.raises(ServerDiedError, match="no vLLM replica of 'm' became ready"):
            await asyncio.wait_for(chat(http), 5)
    assert time.monotonic() - start >= 0.5
    pool.cancel_recoveries()


# --- what goes through as it is ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 500, 503])
@sync
async def test_an_error_status_is_returned_not_retried(serve, status):
    servers = [serve(status=status), serve(status=status)]
    actors = Actors(serve)
    pool = await ready_pool(servers, actors)
    async with routed(pool) as http:
        assert (await chat(http)).status_code == status
    assert sum(received(servers)) == 1
    assert actors.calls == [] and [r.state for r in pool.replicas] == ["ready", "ready"]


@sync
async def test_a_request_reaches_its_replica_with_its_host_path_headers_body_and_the_replicas_own_key(serve):
    servers = [serve(), serve()]
    pool = await ready_pool(servers, Actors(serve))
    async with routed(pool) as http:
        client = AsyncOpenAI(base_url=str(http.base_url), api_key="the-clients-key", http_client=http)
        replies = await asyncio.gather(*(client.chat.completions.create(**CHAT) for _ in servers))
    assert [reply.choices[0].message.content for reply in replies] == ["hello", "hello"]
    for server, replica in zip(servers, pool.replicas, strict=True):
        [(path, headers)] = server.seen
        assert path == "/v1/chat/completions"
        assert headers["host"] == f"127.0.0.1:{server.httpd.server_port}"
        assert headers["authorization"] == f"Bearer {replica.key}"  # its own key, never the client's
        assert server.requests == [CHAT]


# --- the same pool behind a local address (PoolProxy: the embedded judge's and generator's way in) ---------


async def set_event(event: asyncio.Event) -> None:
    event.set()


def blocking_chats(proxy: PoolProxy, count: int) -> list[str]:
    """`count` requests at once to the proxy, with its key, each from its own thread with a blocking client (as
    DSPy sends)."""
    client = OpenAI(base_url=proxy.base_url, api_key=proxy.api_key, max_retries=0)
    with ThreadPoolExecutor(count) as threads:
        replies = list(threads.map(lambda _: client.chat.completions.create(**CHAT), range(count)))
    return [reply.choices[0].message.content for reply in replies]


def test_the_proxy_spreads_blocking_clients_over_the_replicas(serve, proxied):
    gate = threading.Event()
    servers = [serve(gate=gate), serve(gate=gate)]
    proxy, pool, _ = proxied(servers)
    assert proxy.base_url.startswith("http://127.0.0.1:") and proxy.base_url.endswith("/v1")
    with ThreadPoolExecutor(1) as background:
        sent = background.submit(blocking_chats, proxy, 8)
        deadline = time.monotonic() + 10
        while sum(received(servers)) < 8:
            assert time.monotonic() < deadline and not sent.done(), "the requests did not all arrive"
            time.sleep(0.01)
        assert outstanding(pool) == [4, 4]
        gate.set()
        assert sent.result(10) == ["hello"] * 8
    assert received(servers) == [4, 4]
    assert outstanding(pool) == [0, 0]
    path, headers = servers[0].seen[0]
    assert path == "/v1/chat/completions" and headers["authorization"] == f"Bearer {pool.replicas[0].key}"
    assert headers["host"] == f"127.0.0.1:{servers[0].httpd.server_port}"


def test_the_proxy_refuses_every_request_without_its_key_and_never_passes_its_key_on(serve, proxied):
    servers = [serve()]
    proxy, pool, _ = proxied(servers)
    for key in (None, "wrong", pool.replicas[0].key):  # a replica's key does not open the proxy
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        for method, path in (
            ("POST", "/v1/chat/completions"),
            ("GET", "/v1/models"),
            ("POST", "/pause"),
            ("GET", "/metrics"),
        ):
            response = httpx.request(method, proxy.base_url.removesuffix("/v1") + path, json=CHAT, headers=headers)
            assert response.status_code == 401, (key, path)
    assert servers[0].seen == []  # nothing reached the replica
    assert blocking_chats(proxy, 1) == ["hello"]
    [(_, headers)] = servers[0].seen
    assert (
        proxy.api_key not in headers["authorization"] and headers["authorization"] == f"Bearer {pool.replicas[0].key}"
    )


def test_through_the_proxy_a_dead_replica_loses_no_request_and_is_restarted(serve, proxied):
    servers = [serve(), serve()]
    proxy, pool, actors = proxied(servers)
    actors.hold_restart = asyncio.Event()
    servers[0].close()
    assert blocking_chats(proxy, 4) == ["hello"] * 4
    assert received(servers)[1] == 4
    assert actors.restarts() == [("restart", 0)]
    proxy.run(set_event(actors.hold_restart))
    deadline = time.monotonic() + 5
    while pool.replicas[0].state != "ready":  # restarted in the proxy's loop, then routable again
        assert time.monotonic() < deadline, pool.replicas[0].state
        time.sleep(0.01)
    assert actors.calls == [("restart", 0), ("load", 0, pool.step)]
    assert blocking_chats(proxy, 2) == ["hello"] * 2
    assert received([actors.fresh[0], servers[1]]) == [1, 5]
    assert actors.fresh[0].seen[0][1]["authorization"] == "Bearer restarted-key-0"  # the restarted server's key


def test_the_proxy_passes_an_error_status_on_and_answers_503_when_every_replica_is_dead(serve, proxied):
    proxy, _, _ = proxied([serve(status=400)])
    keyed = {"Authorization": f"Bearer {proxy.api_key}"}
    assert httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT, headers=keyed).status_code == 400
    dead = [serve(), serve()]
    proxy, pool, actors = proxied(dead, max_restarts=1)
    actors.broken = True
    for server in dead:
        server.close()
    keyed = {"Authorization": f"Bearer {proxy.api_key}"}
    response = httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT, headers=keyed, timeout=10)
    assert response.status_code == 503
    assert response.text == "every vLLM replica of 'm' died more than 1 times"
    assert [r.state for r in pool.replicas] == ["dead", "dead"]


def test_a_closed_proxy_ends_its_thread_and_its_address(serve, proxied):
    proxy, _, _ = proxied([serve()])
    assert blocking_chats(proxy, 1) == ["hello"]
    proxy.close()
    assert not proxy._thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT)
    proxy.close()  # again: nothing to do
