"""One `autorl serve` reached over HTTP: the requests `RemoteBackend` sends, with their retries and limits.

Faults: a request that cannot reach the server, or that it answers 5xx, is sent again with exponential
backoff (a server restarting resumes its models from their newest checkpoints), then ends in one
`AutoRLError` line naming the URL. Every answer is read as answers.py reads what a server it does not trust
says: bounded in bytes, depth and time (a deadline on the whole answer, not only a timeout per read), an error as
one printable line; a download (a checkpoint's .tar.gz) is bounded in bytes as sent and as unpacked, holds files
and directories only, and unpacks into a directory that appears whole or not at all.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import logging
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from ...errors import AutoRLError
from ...serving.auth import bearer
from ...serving.config import LOOPBACK_HOSTS
from ...threads import in_time
from .answers import (
    MAX_ANSWER_BYTES,
    MAX_ERROR_BYTES,
    NOT_ASKED,
    check_encoding,
    error_line,
    head,
    parsed_json,
    printable,
    read_into,
    unpack,
)
from .wire import CLIENT_HEADER, DEFAULT_PORT, GZIP_OVER_BYTES, TOKEN_ENV, URL_ENV, invalid_line

log = logging.getLogger("autorl")

REQUEST_TIMEOUT = httpx.Timeout(3600, connect=10)
"""A training step on a CPU, or one waiting for the server to start the model's vLLM, takes minutes."""
ANSWER_DEADLINE_S = 3600.0
"""The longest one try of a request takes, its whole answer included: the per-read timeout bounds a silence, not a
server that answers a byte every few seconds."""
PROBE_DEADLINE_S = 10.0
"""The longest a quick request takes, its answer included: a health check, the check before a run, a release."""
MAX_DOWNLOAD_BYTES = 4 * 2**30
"""The largest checkpoint a client downloads (as sent, and unpacked): a LoRA's adapter is megabytes."""
A = TypeVar("A", bound=BaseModel)


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
                f"RemoteBackend needs the server's token: pass api_key=TOKEN or set {TOKEN_ENV} "
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

    max_answer_bytes = MAX_ANSWER_BYTES
    """The largest JSON answer read from the server (more is one error line, not read further)."""
    answer_deadline_s = ANSWER_DEADLINE_S
    """The longest one try of a request may take, from its connection to its answer's last byte (past it: one
    error line, not tried again); raise it for a training step that takes longer."""
    probe_deadline_s = PROBE_DEADLINE_S
    """The longest a health check, the check before a run or a release may take, its answer included."""

    @property
    def headers(self) -> dict[str, str]:
        return {**bearer(self.api_key), CLIENT_HEADER: self.client_id, "Accept-Encoding": NOT_ASKED}

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
        answer = io.BytesIO()
        await self._send(method, path, content, headers, idempotent, answer, self.max_answer_bytes)
        try:
            return parsed_json(answer.getvalue())
        except ValueError as exc:
            raise AutoRLError(
                f"autorl server {self.url}{path}: the answer is not JSON ({printable(str(exc), 80)}); "
                f"is {self.url} an autorl server?"
            ) from None

    async def answer(self, kind: type[A], method: str, path: str, body: BaseModel | None = None, **kwargs: Any) -> A:
        """`request`'s answer read as a `kind`; one `AutoRLError` line when the server's JSON is not one."""
        data = await self.request(method, path, body, **kwargs)
        try:
            return kind.model_validate(data)
        except ValidationError as exc:
            raise AutoRLError(
                f"autorl server {self.url}{path}: unexpected answer ({invalid_line(exc)}); "
                "are this client and the server the same autorl version?"
            ) from None

    async def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        headers: dict[str, str],
        idempotent: bool,
        into: IO[bytes],
        limit: int,
    ) -> None:
        """Send a request, its answer's body written `into` (emptied before each try), at most `limit` bytes;
        retried as `request` says."""
        where = f"{self.url}{path}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                wait = self.backoff_s * 2 ** (attempt - 1)
                log.warning(
                    "autorl server %s: %s; trying again in %.1f s (%d of %d)", where, last, wait, attempt, self.retries
                )
                await asyncio.sleep(wait)
            into.seek(0)
            into.truncate()
            try:
                async with asyncio.timeout(self.answer_deadline_s):
                    status, line = await self._exchange(method, where, content, headers, into, limit)
            except TimeoutError:
                raise AutoRLError(
                    f"autorl server {where}: no whole answer within {self.answer_deadline_s:g} s (it came too slowly); "
                    "is it an autorl server? (a longer training step: raise RemoteBackend.answer_deadline_s)"
                ) from None
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if idempotent or isinstance(exc, httpx.ConnectError):
                    continue
                break
            if status < 400:
                return
            if status >= 500 and (idempotent or status == 503):
                last = f"HTTP {status}: {line}"
                continue
            raise AutoRLError(f"autorl server {where}: {line} (HTTP {status})")
        raise AutoRLError(f"autorl server {where} failed after {attempt + 1} tries ({printable(last)})")

    async def _exchange(
        self, method: str, where: str, content: bytes | None, headers: dict[str, str], into: IO[bytes], limit: int
    ) -> tuple[int, str]:
        """One request: its status and, for an error, what the server says of it in one line; an answer's body
        is written `into`, at most `limit` bytes (one error line past them)."""
        async with (
            httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client,  # per call: any event loop may call
            client.stream(method, where, content=content, headers=headers) as response,
        ):
            self.bytes_sent += len(content or b"")
            if response.status_code >= 400:
                error = io.BytesIO()
                await read_into(response, error.write, MAX_ERROR_BYTES)
                return response.status_code, error_line(error.getvalue(), response.reason_phrase)
            check_encoding(response, where)
            if await read_into(response, into.write, limit):
                raise AutoRLError(f"autorl server {where}: the answer is over {limit} bytes; is it an autorl server?")
            return response.status_code, ""

    def check_reachable(self) -> None:
        """One `AutoRLError` line, within `probe_deadline_s`, when the server does not answer or refuses the token
        (no retries: for a check before anything expensive starts)."""
        try:
            status, raw, reason = in_time(self._probe, self.probe_deadline_s)
        except (httpx.TransportError, TimeoutError) as exc:
            raise AutoRLError(
                f"autorl server {self.url} does not answer ({type(exc).__name__}): is `autorl serve` running there?"
            ) from None
        if status == 401:
            raise AutoRLError(f"autorl server {self.url} refused the token: set {TOKEN_ENV} to the server's")
        if status >= 400:
            raise AutoRLError(f"autorl server {self.url}: {error_line(raw, reason)} (HTTP {status})")

    def _probe(self) -> tuple[int, bytes, str]:
        """`GET /v1/models`: its status, the first `MAX_ERROR_BYTES` of its answer, its status's phrase."""
        with (
            httpx.Client(timeout=self.probe_deadline_s) as client,
            client.stream("GET", f"{self.url}/v1/models", headers=self.headers) as response,
        ):
            return response.status_code, head(response.iter_raw(), MAX_ERROR_BYTES), response.reason_phrase

    async def download(self, path: str, target: Path) -> Path:
        """Unpack the .tar.gz at `path` on the server into the directory `target` (made whole or not at all;
        files and directories only, nothing outside it), at most `max_download_bytes` as sent and as unpacked."""
        with tempfile.TemporaryFile() as spool:
            await self._send("GET", path, None, self.headers, True, spool, self.max_download_bytes)
            spool.seek(0)
            await asyncio.to_thread(unpack, spool, target, self.max_download_bytes, f"{self.url}{path}")
        return target

    async def wait_for_health(self) -> bool:
        """Wait for the server to answer its health check again (it restarts, or its network came back),
        with the requests' backoff; whether it does."""
        for attempt in range(self.retries + 1):
            try:
                async with (
                    asyncio.timeout(self.probe_deadline_s),
                    httpx.AsyncClient(timeout=self.probe_deadline_s) as client,
                ):
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return True
            except (httpx.TransportError, TimeoutError):
                pass
            await asyncio.sleep(self.backoff_s * 2**attempt)
        return False
