"""The key of a server autorl starts: made per server (`new_key`), handed only to autorl's own clients, and
required on every path but `/health` (`RequireKey`, `authorized`).

Every server autorl runs checks it: each vLLM server (`VLLMServer` starts vLLM with `--middleware
autorl.serving.auth.RequireKey` and the key in its environment, `KEY_ENV`, never on its command line, which
any local user can read), the replicas of a Ray cluster (each its own key), and the local address of a
pool of replicas (`autorl.backends.cluster.proxy.PoolProxy`). A server of autorl's own that is an ASGI app
(FastAPI, Starlette) adds `RequireKey` with its key (`app.add_middleware(RequireKey, key=key)`); one on
another framework calls `authorized` with the request's Authorization header.

vLLM's own `--api-key` is not enough: it guards paths under /v1 only, while `/server_info`, `/metrics`,
`/tokenize` and, in merged serving, the development endpoints that swap the weights (`/pause`,
`/collective_rpc`, ...) answer anyone. A key is never logged or written: the clients hold it in memory.
This module imports only the standard library: vLLM's process imports it to build its app.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

KEY_ENV = "AUTORL_SERVER_KEY"
"""The environment variable a vLLM server process reads its key from (`RequireKey` without a key)."""
OPEN_PATHS = frozenset({"/health"})
"""The paths a server answers without the key: its health check, which tells nothing but that it runs."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def new_key() -> str:
    """A fresh random key for one server (256 bits)."""
    return secrets.token_urlsafe(32)


def bearer(key: str) -> dict[str, str]:
    """The header that carries `key` (as OpenAI clients send their API key)."""
    return {"Authorization": f"Bearer {key}"}


def authorized(authorization: str | None, key: str) -> bool:
    """Whether an Authorization header value carries `key` (`Bearer <key>`), compared in constant time."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key:
        return False
    digest = hashlib.sha256  # equal-length inputs for the comparison
    return secrets.compare_digest(digest(token.strip().encode()).digest(), digest(key.encode()).digest())


class RequireKey:
    """ASGI middleware: a request to any path but `OPEN_PATHS` without the key is answered 401 (a websocket
    is closed) before it reaches the app. `key`: the key; None reads it from the environment (`KEY_ENV`), as
    vLLM builds its middleware without arguments, and refuses to start without one."""

    def __init__(self, app: Callable[..., Awaitable[None]], key: str | None = None):
        self.app = app
        self.key = key if key is not None else os.environ.get(KEY_ENV, "")
        if not self.key:
            raise RuntimeError(f"RequireKey needs a key: pass one, or set {KEY_ENV}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: the app's start and stop
            return await self.app(scope, receive, send)
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        headers = dict(scope.get("headers") or [])
        if path in OPEN_PATHS or authorized(headers.get(b"authorization", b"").decode("latin-1"), self.key):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return None
        body = json.dumps({"error": "Unauthorized: this server needs its key (Authorization: Bearer ...)"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return None
