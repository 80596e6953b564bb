"""Security findings about the vLLM launcher (`autorl.serving.launcher`) and its stand-in (`launcher_attach.py`),
over real UNIX sockets with descriptors passed: what a peer sends cannot stop the launcher (a signal number the
system does not know), leak its descriptors (a bad request's three streams) or hold its loop (a trickling peer);
and the stand-in sends its environment only to a launcher of its own user in a directory of mode 0700."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autorl.serving import launcher_attach
from tests.helpers.limits import scaled
from tests.helpers.processes import children

LOOP = """
import sys, time, socket
from autorl.serving import launcher

def asleep(request, fds, keep_closed):  # the forked server, at the test's edge: a process that waits to be killed
    import os, signal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as the real server does (the launcher's handler is inherited)
    os.setsid()  # after it: the test signals once the server has its own group
    time.sleep(600)
    os._exit(0)

launcher.declined = lambda request: None
launcher._run_server = asleep
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(8)
print("ready", flush=True)
launcher.Launcher(listener, request_deadline_s=float(sys.argv[2])).run()
"""
"""The launcher's own loop (`Launcher.run`) over a real socket, its server a sleeping process (no vLLM here)."""
DEADLINE_S = 0.5


@pytest.fixture
def loop(tmp_path):
    directory = tmp_path / "launcher"
    directory.mkdir(mode=0o700)
    path = str(directory / "socket")
    process = subprocess.Popen(
        [sys.executable, "-c", LOOP, path, str(DEADLINE_S)], stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    assert process.stdout.readline() == "ready\n"
    yield process, path
    process.kill()
    process.wait()


def ask(path: str, payload: bytes, shut: bool = False) -> str:
    """What the launcher answers a connection that sends `payload` with three streams (then closes its
    writing side when `shut`), read to the end: the launcher has closed its side."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(scaled(30))
        conn.connect(path)
        socket.send_fds(conn, [payload], [0, 1, 2])
        if shut:
            conn.shutdown(socket.SHUT_WR)
        return conn.makefile().read()


def test_security_a_stand_ins_unknown_signal_does_not_stop_the_launcher(loop):
    process, path = loop
    connected = launcher_attach.connect(path, ["server"])
    assert not isinstance(connected, str), connected
    conn, lines = connected
    (server,) = children(process.pid)
    while os.getsid(server) != server:  # the server is in its own group, as the launcher signals it there
        time.sleep(0.01)
    for sent in ("signal 99\n", "signal \u00b2\n", "signal 0x1\n"):  # EINVAL; isdigit() but not int(); not digits
        conn.sendall(sent.encode())
    conn.sendall(b"signal 15\n")  # then a real one: the launcher is there to relay it and report the exit
    assert lines.next_line(timeout=scaled(30)) == f"exit {128 + 15}"
    assert process.poll() is None


def test_security_a_bad_request_leaks_no_descriptor_of_the_launcher(loop):
    process, path = loop
    open_fds = lambda: len(os.listdir(f"/proc/{process.pid}/fd"))  # noqa: E731
    assert "declined" in ask(path, b"")  # the loop is up (its selector made)
    before = open_fds()
    for _ in range(5):
        assert "over" in ask(path, struct.pack("!I", 1 << 30) + b"{}")  # an oversize length
        assert "declined" in ask(path, struct.pack("!I", 8) + b"not json")
        assert "cut off" in ask(path, struct.pack("!I", 100) + b"{", shut=True)
        assert "declined" in ask(path, struct.pack("!I", 100_000) + b"[" * 100_000)  # nested past the parser
    assert open_fds() == before  # before: three more per bad request
    assert process.poll() is None


def test_security_a_trickling_peer_is_cut_off_at_the_request_deadline(loop):
    process, path = loop
    body = json.dumps({"argv": ["x"] * 40}).encode()
    sent = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        socket.send_fds(conn, [struct.pack("!I", len(body))], [0, 1, 2])

        def trickle() -> None:  # a byte every 50 ms: never silent for a read timeout, 10 s for the whole body
            for byte in body:
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                sent.append(byte)
                time.sleep(0.05)

        threading.Thread(target=trickle, daemon=True).start()
        conn.settimeout(scaled(60))
        answer = conn.makefile().readline()
    assert "no whole request within" in answer, answer  # before: the whole body read, a byte at a time
    assert len(sent) < len(body)
    assert process.poll() is None


def listening(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    listener.setblocking(False)
    return listener


def test_security_the_stand_in_sends_nothing_to_a_socket_in_a_directory_others_may_enter(tmp_path):
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    with listening(str(directory / "socket")) as listener:
        reason = launcher_attach.connect(str(directory / "socket"), ["server"])
        assert isinstance(reason, str) and "mode 0700" in reason, reason
        conn, _ = listener.accept()  # the connection was made, and closed with nothing sent
        with conn:
            conn.setblocking(True)
            assert conn.recv(1) == b""


@pytest.mark.skipif(os.getuid() != 0, reason="listening as another user needs root")
def test_security_the_stand_in_sends_nothing_to_another_users_launcher(tmp_path):
    directory = tmp_path / "launcher"
    directory.mkdir(mode=0o700)
    path = str(directory / "socket")
    other = (
        "import os, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.bind(sys.argv[1]); os.setuid(65534); s.listen(1)\n"
        "print('ready', flush=True); c, _ = s.accept(); print(len(c.recv(1 << 20)), flush=True)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", other, path], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "ready\n"
        reason = launcher_attach.connect(path, ["server"])
        assert isinstance(reason, str) and "another user's (uid 65534)" in reason, reason
        assert process.stdout.readline() == "0\n"  # it received nothing
    finally:
        process.kill()
        process.wait()
