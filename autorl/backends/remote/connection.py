"""One `autorl serve` reached over HTTP: the requests `RemoteBackend` sends, with their retries and limits.

Faults: a request that cannot reach the server, or that it answers 5xx, is sent again with exponential
backoff (a server restarting resumes its models from their newest checkpoints), then ends in one
`AutoRLError` line naming the URL. A download (a checkpoint's .tar.gz) is bounded in bytes as sent and as
unpacked, and unpacks into a directory that appears whole or not at all.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import re
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from ...atomic import atomic_dir
from ...errors import AutoRLError
from ...serving.auth import bearer
from ...serving.config import LOOPBACK_HOSTS
from .wire import CLIENT_HEADER, DEFAULT_PORT, GZIP_OVER_BYTES, TOKEN_ENV, URL_ENV

log = logging.getLogger("autorl")

REQUEST_TIMEOUT = httpx.Timeout(3600, connect=10)
"""A training step on a CPU, or one waiting for the server to start the model's vLLM, takes minutes."""
MAX_DOWNLOAD_BYTES = 4 * 2**30
"""The largest checkpoint a client downloads (as sent, and unpacked): a LoRA's adapter is megabytes."""
A = TypeVar("A", bound=BaseModel)


def error_line(response: httpx.Response) -> str:
    """What a server's error answer says, in one line."""
    try:
        text = str(response.json().get("error") or response.json())
    except (ValueError, AttributeError):
        text = response.text
    return " ".join(text.split())[:500] or response.reason_phrase


class Connection:
    """The server at `url`, its token `api_key` and this client's id (`RemoteBackend` documents each argument):
    requests with retries (`retries` more tries, waiting `backoff_s`, then twice as long each time), answers
    read as the wire's models, bounded downloads."""

    def __init__(
        self,
        url: str | None,
        api_key: str | None,
        client_id: str | None,
        retries: int,
        backoff_s: float,
        max_download_bytes: int,
    ):
        url = url or os.environ.get(URL_ENV)
        if not url:
            raise AutoRLError(
                f"RemoteBackend needs the server's URL: pass url= (http://host:{DEFAULT_PORT}) or set {URL_ENV}"
            )
        if not url.startswith(("http://", "https://")):
            raise AutoRLError(f"RemoteBackend url {url!r}: expected http://host:port or https://host")
        self.url = url.rstrip("/").removesuffix("/v1")
        if self.url.startswith("http://") and urlsplit(self.url).hostname not in LOOPBACK_HOSTS:
            log.warning(
                "RemoteBackend %s: plain HTTP to another machine sends the token and every trajectory in clear; "
                "use https:// (autorl serve --ssl-certfile/--ssl-keyfile, or a TLS proxy)",
                self.url,
            )
        api_key = api_key if api_key is not None else os.environ.get(TOKEN_ENV)
        if not api_key:
            raise AutoRLError(
                f"RemoteBackend needs the server's token: pass api_key= or set {TOKEN_ENV} "
                "(`autorl serve` wrote it to HOME/serve/token unless given one)"
            )
        self.api_key = api_key
        self.client_id = client_id or uuid.uuid4().hex
        """This client's id (`CLIENT_HEADER`): the server lets one client at a time train a model."""
        if not re.fullmatch(r"[A-Za-z0-9_]{8,48}", self.client_id):
            raise AutoRLError("RemoteBackend client_id: 8-48 letters, digits or '_'")
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_download_bytes = max_download_bytes
        self.bytes_sent = 0
        """Request body bytes sent (after compression), for measurements."""

    @property
    def headers(self) -> dict[str, str]:
        return {**bearer(self.api_key), CLIENT_HEADER: self.client_id}

    async def request(self, method: str, path: str, body: BaseModel | None = None, *, idempotent: bool = True) -> Any:
        """Send a request to the server and return its JSON answer. A connection that fails, or a 5xx, is tried
        again with backoff (`idempotent=False`: only a connection that was never made, so nothing is recorded
        twice); then, like a 4xx, it is one `AutoRLError` line naming the URL."""
        headers = dict(self.headers)
        content = None
        if body is not None:
            content = body.model_dump_json().encode()
            headers["Content-Type"] = "application/json"
            if len(content) > GZIP_OVER_BYTES:
                content = gzip.compress(content, compresslevel=1)
                headers["Content-Encoding"] = "gzip"
        response = await self._send(method, path, content, headers, idempotent)
        try:
            return response.json()
        except ValueError:
            raise AutoRLError(
                f"autorl server {self.url}{path}: the answer is not JSON; is {self.url} an autorl server?"
            ) from None

    async def answer(self, kind: type[A], method: str, path: str, body: BaseModel | None = None, **kwargs: Any) -> A:
        """`request`'s answer read as a `kind`; one `AutoRLError` line when the server's JSON is not one."""
        data = await self.request(method, path, body, **kwargs)
        try:
            return kind.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the answer"
            raise AutoRLError(
                f"autorl server {self.url}{path}: unexpected answer ({where}: {first['msg']}); "
                "are this client and the server the same autorl version?"
            ) from None

    async def _send(
        self, method: str, path: str, content: bytes | None, headers: dict[str, str], idempotent: bool
    ) -> httpx.Response:
        where = f"{self.url}{path}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                wait = self.backoff_s * 2 ** (attempt - 1)
                log.warning(
                    "autorl server %s: %s; trying again in %.1f s (%d of %d)", where, last, wait, attempt, self.retries
                )
                await asyncio.sleep(wait)
            try:
                async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:  # per call: any event loop may call
                    response = await client.request(method, where, content=content, headers=headers)
                    self.bytes_sent += len(content or b"")
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if idempotent or isinstance(exc, httpx.ConnectError):
                    continue
                break
            if response.status_code < 400:
                return response
            if response.status_code >= 500 and (idempotent or response.status_code == 503):
                last = f"HTTP {response.status_code}: {error_line(response)}"
                continue
            raise AutoRLError(f"autorl server {where}: {error_line(response)} (HTTP {response.status_code})")
        raise AutoRLError(f"autorl server {where} failed after {attempt + 1} tries ({last})")

    def check_reachable(self) -> None:
        """One `AutoRLError` line, at once, when the server does not answer or refuses the token (no retries:
        for a check before anything expensive starts)."""
        try:
            response = httpx.get(f"{self.url}/v1/models", headers=self.headers, timeout=10)
        except httpx.TransportError as exc:
            raise AutoRLError(
                f"autorl server {self.url} does not answer ({type(exc).__name__}): is `autorl serve` running there?"
            ) from None
        if response.status_code == 401:
            raise AutoRLError(f"autorl server {self.url} refused the token: set {TOKEN_ENV} to the server's")
        if response.status_code >= 400:
            raise AutoRLError(f"autorl server {self.url}: {error_line(response)} (HTTP {response.status_code})")

    async def download(self, path: str, target: Path) -> Path:
        """Unpack the .tar.gz at `path` on the server into the directory `target` (made whole or not at all;
        nothing of the archive lands outside it), at most `max_download_bytes` as sent and as unpacked."""
        where = f"{self.url}{path}"
        with tempfile.TemporaryFile() as spool:
            await self._download(where, spool)
            spool.seek(0)
            with atomic_dir(target) as filling, tarfile.open(fileobj=spool, mode="r:gz") as archive:
                if sum(member.size for member in archive.getmembers()) > self.max_download_bytes:
                    raise AutoRLError(f"{where}: the checkpoint unpacks past {self.max_download_bytes} bytes")
                archive.extractall(filling, filter="data")  # no paths outside it, no links out, no devices
        return target

    async def _download(self, where: str, spool: IO[bytes]) -> None:
        """Stream `where` into `spool`, at most `max_download_bytes` (a connection that fails is tried again)."""
        for attempt in range(self.retries + 1):
            spool.seek(0)
            spool.truncate()
            try:
                async with (
                    httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client,
                    client.stream("GET", where, headers=self.headers) as response,
                ):
                    if response.status_code >= 400:
                        await response.aread()
                        raise AutoRLError(
                            f"autorl server {where}: {error_line(response)} (HTTP {response.status_code})"
                        )
                    async for chunk in response.aiter_bytes():
                        if spool.tell() + len(chunk) > self.max_download_bytes:
                            raise AutoRLError(f"{where}: the checkpoint is over {self.max_download_bytes} bytes")
                        spool.write(chunk)
                    return
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise AutoRLError(f"autorl server {where} does not answer ({type(exc).__name__})") from None
                await asyncio.sleep(self.backoff_s * 2**attempt)

    async def wait_for_health(self) -> bool:
        """Wait for the server to answer its health check again (it restarts, or its network came back),
        with the requests' backoff; whether it does."""
        for attempt in range(self.retries + 1):
            try:
                async with httpx.AsyncClient(timeout=httpx.Timeout(10)) as client:
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return True
            except httpx.TransportError:
                pass
            await asyncio.sleep(self.backoff_s * 2**attempt)
        return False
