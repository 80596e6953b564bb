"""The aiohttp and requests hooks of the capture scopes, as ART 2026 has them (recorder.py holds httpx's and the scope
stack): an agent whose OpenAI-compatible calls go through `aiohttp.ClientSession` or `requests` (its own HTTP code,
a framework built on them) is recorded as one on the OpenAI SDK is. Each package is patched once a scope begins,
where it is installed: `ClientSession._request` (its response's body stream read through a copy, recorded once read
to its end), `requests.Session.send` (an answer recorded as it arrives) and `requests.Response.iter_content` (a
stream recorded once read to its end or closed). A call made inside an httpx send (an httpx transport over aiohttp,
as LiteLLM has) is recorded once, by httpx's hook.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from .recorder import Call, begin

try:
    import aiohttp
except ImportError:  # pragma: no cover - an optional package
    aiohttp = None
try:
    import requests
except ImportError:  # pragma: no cover - an optional package
    requests = None

_PATCHED = "_autorl_capture"
_CALL = "_autorl_capture_call"
"""The attribute of a streamed `requests.Response` that holds the call it records into."""


def _bytes(body: Any) -> bytes | None:
    """A request body as bytes: bytes or text as they are, a JSON value written out; None for anything else (a
    form, a file, a generator: not a chat completion the SDKs send)."""
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return None


class _ReadThrough:
    """An aiohttp response's body stream (`StreamReader`) read through: what each read returns reaches the reader and
    the call's copy; the call is recorded once the stream is at its end (or an iteration over it ends)."""

    def __init__(self, stream: Any, call: Call, status: int):
        self._stream, self._call, self._status = stream, call, status

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _kept(self, value: Any) -> Any:
        chunk = value[0] if isinstance(value, tuple) else value  # readchunk: (bytes, end of an HTTP chunk)
        if isinstance(chunk, bytes):
            self._call.body.extend(chunk)
        if self._stream.at_eof():
            self._call.finish(self._status)
        return value

    async def read(self, n: int = -1) -> bytes:
        return self._kept(await self._stream.read(n))

    async def readany(self) -> bytes:
        return self._kept(await self._stream.readany())

    async def readline(self) -> bytes:
        return self._kept(await self._stream.readline())

    async def readchunk(self) -> tuple[bytes, bool]:
        return self._kept(await self._stream.readchunk())

    async def readexactly(self, n: int) -> bytes:
        return self._kept(await self._stream.readexactly(n))

    async def _through(self, chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for chunk in chunks:
                yield self._kept(chunk)
        finally:
            self._call.finish(self._status)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._through(self._stream.__aiter__())

    def iter_any(self) -> AsyncIterator[bytes]:
        return self._through(self._stream.iter_any())

    def iter_chunked(self, n: int) -> AsyncIterator[bytes]:
        return self._through(self._stream.iter_chunked(n))

    def iter_chunks(self) -> AsyncIterator[tuple[bytes, bool]]:
        return self._through(self._stream.iter_chunks())


def _patch_aiohttp() -> None:
    original = aiohttp.ClientSession._request

    async def request(self: Any, method: str, str_or_url: Any, **kwargs: Any) -> Any:
        def content() -> bytes | None:
            given = kwargs.get("json")
            return json.dumps(given).encode() if given is not None else _bytes(kwargs.get("data"))

        call = begin(method, str(str_or_url).partition("?")[0], content)
        response = await original(self, method, str_or_url, **kwargs)
        if call is not None:
            response.content = _ReadThrough(response.content, call, response.status)
        return response

    setattr(request, _PATCHED, True)
    aiohttp.ClientSession._request = request


def _patch_requests() -> None:
    send, iter_content = requests.Session.send, requests.Response.iter_content

    def patched_send(self: Any, request: Any, **kwargs: Any) -> Any:
        call = begin(request.method or "GET", request.path_url or "", lambda: _bytes(request.body))
        response = send(self, request, **kwargs)
        if call is not None:
            if kwargs.get("stream", False):
                setattr(response, _CALL, call)
            else:  # read already
                call.finish(response.status_code, response.content)
        return response

    def patched_iter_content(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        call: Call | None = getattr(self, _CALL, None)
        try:
            for chunk in iter_content(self, *args, **kwargs):
                if call is not None:
                    call.body.extend(chunk.encode(self.encoding or "utf-8") if isinstance(chunk, str) else chunk)
                yield chunk
        finally:
            if call is not None:
                call.finish(self.status_code)

    setattr(patched_send, _PATCHED, True)
    requests.Session.send = patched_send
    requests.Response.iter_content = patched_iter_content


def install() -> None:
    """Patches aiohttp and requests, those installed, once (the caller holds the recorder's lock)."""
    if aiohttp is not None and not getattr(aiohttp.ClientSession._request, _PATCHED, False):
        _patch_aiohttp()
    if requests is not None and not getattr(requests.Session.send, _PATCHED, False):
        _patch_requests()
