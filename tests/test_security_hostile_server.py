"""A hostile `autorl serve`: answers a real HTTP server on 127.0.0.1 sends `RemoteBackend`, each read as one
`AutoRLError` line (no traceback, no terminal escape, bounded in size), in bounded memory, depth and time (an
answer that trickles in a byte at a time), and a checkpoint archive that writes nothing outside its target (no
paths out, no links, no devices)."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import socket
import tarfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from autorl import TrainableModel
from autorl.backends.remote.answers import unpack
from autorl.backends.remote.client import RemoteBackend
from autorl.backends.remote.wire import History
from autorl.errors import AutoRLError
from tests.helpers.limits import scaled
from tests.helpers.remote import TOKEN

ANSWER_CAP = 64 * 1024
"""The client's answer cap in these tests (`RemoteBackend.max_answer_bytes`), so an oversized answer is small."""


def tar_gz(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info, data


GOOD = tar_gz(member("adapter_model.safetensors"), member("metrics.json", data=b"{}"))
JSON = {"Content-Type": "application/json"}

ANSWERS: dict[str, tuple[int, dict[str, str], bytes]] = {
    "nested 100000 deep": (200, JSON, b"[" * 100_000),
    "an error nested 100000 deep": (400, JSON, b'{"error": ' + b"[" * 100_000),
    "nested 200 deep, parsed": (200, JSON, b'{"step": 1, "x": ' + b"[" * 200 + b"]" * 200 + b"}"),
    "gzip it cannot inflate": (200, {**JSON, "Content-Encoding": "gzip"}, b"not gzip at all"),
    "a gzip bomb": (200, {**JSON, "Content-Encoding": "gzip"}, gzip.compress(b'{"step": 1' + b" " * 2**24 + b"}")),
    "an encoding it did not ask for": (200, {**JSON, "Content-Encoding": "br"}, b'{"step": 1}'),
    "over the answer cap": (200, JSON, b'{"step": 1' + b" " * (2 * ANSWER_CAP) + b"}"),
    "an error over the answer cap": (400, JSON, b'{"error": "' + b"e" * (2 * ANSWER_CAP) + b'"}'),
    "terminal escapes in an error": (400, JSON, json.dumps({"error": "\x1b]0;pwned\x07\x1b[2J bad\x00\r"}).encode()),
    "an unknown charset": (400, {"Content-Type": "text/plain; charset=nope"}, b"\xff\xfe bad"),
    "not JSON": (200, {"Content-Type": "text/html"}, b"<html>"),
    "JSON of another shape": (200, JSON, b'{"step": "three"}'),
    "a step past the highest": (200, JSON, b'{"step": 1' + b"0" * 30 + b"}"),
    "not UTF-8": (200, JSON, b'{"step": "\xff"}'),
}
"""Answers to `GET /models/m/step` (`RemoteBackend.get_step`)."""

ARCHIVES: dict[str, bytes] = {
    "not gzip": b"PK\x03\x04 a zip",
    "cut short": GOOD[: len(GOOD) // 2],
    "a corrupt stream": GOOD[:20] + bytes(b ^ 0xFF for b in GOOD[20:40]) + GOOD[40:],
    "a path out": tar_gz(member("../outside/evil")),
    "an absolute path": tar_gz(member("/tmp/autorl-hostile-absolute")),
    "a symlink out": tar_gz(member("link", tarfile.SYMTYPE, link="../outside")),
    "a symlink inside": tar_gz(member("here", tarfile.SYMTYPE, link="."), member("here/x")),
    "a hard link out": tar_gz(member("hard", tarfile.LNKTYPE, link="../outside/file")),
    "a hard link inside": tar_gz(member("a"), member("b", tarfile.LNKTYPE, link="a")),
    "a character device": tar_gz(member("null", tarfile.CHRTYPE)),
    "a fifo": tar_gz(member("pipe", tarfile.FIFOTYPE)),
    "a name too long": tar_gz(member("n" * 300)),
    "a file where a directory is": tar_gz(member("a"), member("a/b")),
    "too many members": tar_gz(*(member(f"f{i}") for i in range(1001))),
    "no files": tar_gz(),
}
"""Answers to `GET /models/m/checkpoints/1` (`RemoteBackend.download_checkpoint`)."""


class Hostile(BaseHTTPRequestHandler):
    answer: tuple[int, dict[str, str], bytes] = (200, JSON, b"{}")

    def do_GET(self) -> None:
        status, headers, body = self.answer
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass

    do_POST = do_GET


@pytest.fixture
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def refused(hostile, answer: tuple[int, dict[str, str], bytes], call: Callable) -> str:
    """The one line `call(backend, model)` raises on `answer`."""
    Hostile.answer = answer
    backend = RemoteBackend(f"http://127.0.0.1:{hostile.server_port}", api_key=TOKEN, retries=0)
    backend.max_answer_bytes = ANSWER_CAP
    with pytest.raises(AutoRLError) as raised:
        asyncio.run(call(backend, TrainableModel(name="m")))
    line = str(raised.value)
    assert line.isprintable() and len(line) <= 700, repr(line)
    return line


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_security_each_hostile_answer_is_one_line(hostile, case):
    line = refused(hostile, ANSWERS[case], lambda backend, model: backend.get_step(model))
    assert "/models/m/step" in line, line


@pytest.mark.parametrize("case", sorted(ARCHIVES))
def test_security_a_hostile_checkpoint_archive_is_one_line_and_writes_nothing_outside(hostile, case, tmp_path):
    target = tmp_path / "mirror" / "checkpoints"
    target.mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    answer = (200, {"Content-Type": "application/gzip"}, ARCHIVES[case])
    line = refused(hostile, answer, lambda backend, model: backend.download_checkpoint(model, 1, target))
    assert "/models/m/checkpoints/1" in line, line
    assert list(target.iterdir()) == [], case  # nothing half unpacked, no temporary left
    assert list((tmp_path / "outside").iterdir()) == [], case
    assert not Path("/tmp/autorl-hostile-absolute").exists()


def test_security_a_good_archive_still_unpacks(hostile, tmp_path):
    Hostile.answer = (200, {"Content-Type": "application/gzip"}, GOOD)
    backend = RemoteBackend(f"http://127.0.0.1:{hostile.server_port}", api_key=TOKEN, retries=0)
    path = asyncio.run(backend.download_checkpoint(TrainableModel(name="m"), 1, tmp_path))
    assert sorted(p.name for p in path.iterdir()) == ["adapter_model.safetensors", "metrics.json"]
    assert (path / "metrics.json").read_text() == "{}"


def test_security_history_and_checkpoint_lists_are_bounded(hostile, tmp_path):
    for body in (b'{"steps": [-1]}', b'{"steps": [1' + b"0" * 30 + b"]}"):
        refused(hostile, (200, JSON, body), lambda backend, model: backend.list_checkpoints(model))
    deep = b'{"history": [{"x": ' + b"[" * 900 + b"]" * 900 + b"}]}"
    refused(hostile, (200, JSON, deep), lambda backend, model: backend.answer(History, "GET", "/models/m/history"))


ROLLOUT_PATHS = [
    "@evil.example/v1",  # the agent's base URL http://127.0.0.1:PORT@evil.example/v1: host evil.example
    ".evil.example/v1",
    "/models/m/rollouts/r1/v1@evil.example",
    "/models/other/rollouts/r1/v1",
    "/models/m/rollouts/r2/v1",
    "/models/m/rollouts/r1/v1/../../../../x",
]


@pytest.mark.parametrize("path", ROLLOUT_PATHS)
def test_security_a_rollout_path_the_server_sends_becomes_a_base_url_only_on_its_own_route(hostile, path):
    answer = (200, JSON, json.dumps({"id": "r1", "path": path}).encode())
    line = refused(hostile, answer, lambda backend, model: backend.capture_rollout(model))
    assert "/models/m/rollouts/ID/v1" in line and "evil" not in line.split("not")[-1], line


def test_security_a_rollout_id_of_dots_is_refused_and_the_servers_own_path_taken(hostile):
    answer = (200, JSON, json.dumps({"id": "..", "path": "/models/m/rollouts/../v1"}).encode())
    refused(hostile, answer, lambda backend, model: backend.capture_rollout(model))
    Hostile.answer = (200, JSON, json.dumps({"id": "r1", "path": "/models/m/rollouts/r1/v1"}).encode())
    backend = RemoteBackend(f"http://127.0.0.1:{hostile.server_port}", api_key=TOKEN, retries=0)
    rollout = asyncio.run(backend.capture_rollout(TrainableModel(name="m")))
    assert rollout.base_url == f"http://127.0.0.1:{hostile.server_port}/models/m/rollouts/r1/v1"


def extended_headers(kind: bytes, sizes: list[int]) -> bytes:
    """A .tar.gz whose one file (`f`) follows extended headers of `kind` (pax `x`, GNU long name `L`) holding
    `sizes` bytes each, written as it is compressed (a header of 64 MiB is 64 KiB here)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=1) as out:
        for size in sizes:
            info = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "././@PaxHeader")
            info.type, info.size = kind, size
            out.write(info.tobuf(tarfile.GNU_FORMAT))
            record = b"%d comment=" % size  # one pax record as long as the header ("N comment=...\n")
            out.write(record + b"c" * (size - len(record) - 1) + b"\n" if kind == tarfile.XHDTYPE else b"\0" * size)
            out.write(b"\0" * (-size % 512))
        info, data = member("f")
        info.size = len(data)
        out.write(info.tobuf(tarfile.GNU_FORMAT) + data + b"\0" * (511 + 1024))
    return buffer.getvalue()


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_security_an_archives_header_cannot_take_memory_before_its_members_are_checked(kind, tmp_path):
    archive = extended_headers(kind, [64 * 2**20])
    tracemalloc.start()
    try:
        with pytest.raises(AutoRLError, match="a header of more than"):
            unpack(io.BytesIO(archive), tmp_path / "c", 2**20, "here")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # the header's 64 MiB never read (before: all of it, at once)
    assert not (tmp_path / "c").exists()


def test_security_an_archive_inflates_no_further_than_its_bound_headers_included(tmp_path):
    chain = extended_headers(tarfile.XHDTYPE, [60 * 1024] * 100)  # 6 MiB of headers, each under MAX_READ
    with pytest.raises(AutoRLError, match="inflates past"):
        unpack(io.BytesIO(chain), tmp_path / "c", 2**20, "here")
    unpack(io.BytesIO(extended_headers(tarfile.XHDTYPE, [60 * 1024] * 10)), tmp_path / "ok", 2**20, "here")
    assert [p.name for p in (tmp_path / "ok").iterdir()] == ["f"]


class Trickle:
    """A server on 127.0.0.1 that answers every request a byte every `every_s` (never silent long enough for a
    read timeout): its head too when `slow_head`, else the head at once and then the body."""

    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"

    def __init__(self, slow_head: bool, every_s: float = 0.2):
        self.slow_head, self.every_s = slow_head, every_s
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(connection,), daemon=True).start()

    def answer(self, connection: socket.socket) -> None:
        with connection:
            request = b""
            while b"\r\n\r\n" not in request and (chunk := connection.recv(65536)):
                request += chunk
            slow = b'{"step": 1' + b" " * (100_000 - 11) + b"}"
            if self.slow_head:
                slow = self.HEAD + slow
            else:
                connection.sendall(self.HEAD)
            for byte in slow:
                if self.stop.is_set():
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:  # the client gave up
                    return
                time.sleep(self.every_s)

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.mark.parametrize("slow_head", [False, True], ids=["a trickled body", "a trickled head"])
def test_security_an_answer_that_trickles_in_is_one_line_at_a_deadline(slow_head):
    """A server that answers a byte every 0.2 s passes every per-read timeout, and would hold the client for
    hours: each of the client's requests (a request, the check before a run, the health check, a release) ends at
    its deadline (`answer_deadline_s`, `probe_deadline_s`), a request in one line naming the URL."""
    server = Trickle(slow_head)
    try:
        backend = RemoteBackend(f"http://127.0.0.1:{server.port}", api_key=TOKEN, retries=0)
        backend.answer_deadline_s = backend.probe_deadline_s = 1.0
        model = TrainableModel(name="m")
        started = time.monotonic()
        with pytest.raises(AutoRLError, match=r"/models/m/step: no whole answer within 1 s \(it came too slowly\)"):
            asyncio.run(backend.get_step(model))
        with pytest.raises(AutoRLError, match=r"does not answer \(TimeoutError\)"):
            backend.check_reachable()
        assert asyncio.run(backend.wait_for_health()) is False
        backend._trained.add("m")
        backend.close()  # the release: given up at its deadline, as any release that fails
        assert time.monotonic() - started < scaled(60)  # each deadline is 1 s; the trickle would take hours
    finally:
        server.close()
