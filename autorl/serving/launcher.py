"""A launcher: one process that imports vLLM's server once and forks a vLLM server for each request.

Most of a vLLM server's start on CPU is Python importing vLLM's OpenAI server with torch, transformers and
their dependencies, the same work at every start (the engine itself starts in about a third of the time:
`benchmarks/perf/perf_server_start.py` measures both). A launcher pays the import once; each server it forks
begins with vLLM imported and runs `vllm_entry` as a fresh process would.

    python -m autorl.serving.launcher SOCKET

`start_launcher` starts one for this process and the processes it starts, which find it through
`AUTORL_VLLM_LAUNCHER` (`LAUNCHER_ENV`, its socket's path). A CPU server whose engine is forked
(`ServerConfig.cpu_fork`) then starts through `launcher_attach.py`, which stands in for the server it asked for
(signals, exit code), so the server's supervisor (`die_with_parent.py --group`) and `VLLMServer.stop` treat it
as before. The launcher serves only requests it can run as the server's own command would run: the same
Python and the same autorl, with the libraries vLLM preloads already loaded (`declined`); others start as
before. The server is not a child of the process that asked for it: it is the launcher's, in a session of its
own, killed when its stand-in ends, and by the kernel when the launcher dies.

Who can ask: the socket lives in a directory only this user can enter (mode 0700), and the launcher answers
only processes of its own user (SO_PEERCRED); the stand-in, in turn, sends nothing to a socket that is not in a
directory of its user's, mode 0700, or whose listener is another user's (`launcher_attach.connect`). A request
carries a command line and an environment, which the launcher runs: the same power as running a program, which
that user has. What a peer of that user sends is read with care all the same: a request within
`REQUEST_DEADLINE_S` (the loop is single-threaded), its descriptors closed on every path, and only a signal
number the system knows relayed.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import ServerStartError
from . import vllm_entry
from .die_with_parent import die_with_parent, wrapped
from .environment import LAUNCHER_ENV, openmp_wait, shared_environment

ATTACH = Path(__file__).with_name("launcher_attach.py")
"""The stand-in a server's supervisor runs instead of the server when a launcher serves it."""
AUTORL_ROOT = Path(__file__).resolve().parents[2]
"""The directory this autorl is imported from (a request from another autorl is declined)."""
MAX_REQUEST = 1 << 20
"""The largest request (command line and environment, as JSON) the launcher reads."""
REQUEST_DEADLINE_S = 2.0
"""How long the launcher waits for a whole request on a connection (a stand-in sends it at once): a silent or
trickling peer holds its single-threaded loop no longer."""
READY_TIMEOUT_S = 60.0
"""How long `start_launcher` waits for the launcher's socket (vLLM is imported after it is listening)."""


def launcher_socket() -> str | None:
    """The socket of the launcher this process's servers start through, if one is named and listening."""
    path = os.environ.get(LAUNCHER_ENV)
    return path if path and Path(path).is_socket() else None


def attached(command: list[str], path: str) -> list[str]:
    """`command` (a server's command line) started through the launcher listening on `path`."""
    return [sys.executable, str(ATTACH), path, "--", *command]


def declined(request: dict) -> str | None:
    """Why this launcher cannot run `request` as its command would run on its own (None: it can)."""
    if not isinstance(request, dict):
        return "a malformed request"
    argv, env = request.get("argv"), request.get("env")
    if not isinstance(argv, list) or not isinstance(env, dict) or not isinstance(request.get("cwd"), str):
        return "a malformed request"
    if argv[:3] != [sys.executable, "-m", vllm_entry.__name__]:
        return f"it runs {sys.executable} -m {vllm_entry.__name__} only"
    if env.get("LD_PRELOAD", "") != os.environ.get("LD_PRELOAD", ""):
        return "the server preloads other libraries than the launcher did"
    if openmp_wait(env) != openmp_wait(os.environ):  # a fork keeps the launcher's, read at its load
        return "the server's OpenMP wait settings differ from the launcher's"
    first = (env.get("PYTHONPATH") or "").split(os.pathsep)[0]
    if not first or Path(first).resolve() != AUTORL_ROOT:
        return f"the server imports autorl from elsewhere than {AUTORL_ROOT}"
    return None


def _read_request(conn: socket.socket, deadline_s: float) -> tuple[dict, list[int]]:
    """A request and the three standard streams sent with it (length-prefixed JSON, fds alongside), whole within
    `deadline_s`; on any error the streams received are closed (ValueError, OSError)."""
    deadline = time.monotonic() + deadline_s

    def until_deadline() -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ValueError(f"no whole request within {deadline_s} s")
        conn.settimeout(left)

    until_deadline()
    try:
        data, fds, _flags, _address = socket.recv_fds(conn, MAX_REQUEST, 3)
    except TimeoutError:
        raise ValueError(f"no request within {deadline_s} s") from None
    try:
        if len(data) < 4 or len(fds) != 3:
            raise ValueError("a request needs its length and three standard streams")
        size = struct.unpack("!I", data[:4])[0]
        if size > MAX_REQUEST:
            raise ValueError(f"a request over {MAX_REQUEST} bytes")
        body = data[4:]
        while len(body) < size:
            until_deadline()
            try:
                chunk = conn.recv(size - len(body))
            except TimeoutError:
                raise ValueError(f"no whole request within {deadline_s} s") from None
            if not chunk:
                raise ValueError("the request was cut off")
            body += chunk
        return json.loads(body), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _run_server(request: dict, fds: list[int], keep_closed: list[socket.socket]) -> None:
    """In a forked child: become the server `request` asks for, on the streams `fds`; never returns."""
    code = 1
    try:
        os.setsid()  # its own session and group: the stand-in's signals reach the server and its engine
        die_with_parent(signal.SIGKILL)
        for sock in keep_closed:
            sock.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        with contextlib.suppress(ImportError):  # vLLM's dependency, which also names its engine processes
            import setproctitle  # in the child only, and before its environment is replaced, which it relies on

            setproctitle.setproctitle(" ".join(request["argv"]))  # `ps` shows the server, not the launcher
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [vllm_entry.VLLM_SERVER, *request["argv"][3:]]
        # runpy's note that the module it runs is imported already: it is, on purpose
        warnings.filterwarnings("ignore", "'vllm.entrypoints", RuntimeWarning)
        runpy.run_module(vllm_entry.VLLM_SERVER, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # the child reports any failure in its log and exits
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


@dataclass
class _Child:
    pid: int
    conn: socket.socket


class Launcher:
    """The launcher process's loop: accept requests, fork servers, relay signals and exit codes."""

    def __init__(self, listener: socket.socket, request_deadline_s: float = REQUEST_DEADLINE_S) -> None:
        self.listener = listener
        self.request_deadline_s = request_deadline_s
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.children: dict[int, _Child] = {}
        self.stopping = False

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        while not self.stopping:  # ended servers are reaped at least every half second
            for key, _events in self.selector.select(timeout=0.5):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._from_stand_in(key.data)
            self._reap()
        for child in list(self.children.values()):
            self._kill(child, signal.SIGKILL)

    def _accept(self) -> None:
        try:
            conn, _address = self.listener.accept()
        except OSError:  # out of file descriptors, or the asker gone: it starts its server itself
            return
        _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            conn.close()
            return
        try:
            request, fds = _read_request(conn, self.request_deadline_s)
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested past the parser
            with contextlib.suppress(OSError):
                conn.sendall(f"declined {exc}\n".encode())
            conn.close()
            return
        conn.settimeout(self.request_deadline_s)  # for the lines the launcher sends it from now on
        pid = None if (reason := declined(request)) else self._fork(request, fds, conn)
        for fd in fds:
            os.close(fd)
        if pid is None:
            with contextlib.suppress(OSError):
                conn.sendall(f"declined {reason or 'the launcher could not fork'}\n".encode())
            conn.close()
            return
        child = _Child(pid, conn)
        self.children[pid] = child
        with contextlib.suppress(OSError):  # a stand-in gone meanwhile: its end is read below, and kills the server
            conn.sendall(f"pid {pid}\n".encode())
        self.selector.register(conn, selectors.EVENT_READ, child)

    def _fork(self, request: dict, fds: list[int], conn: socket.socket) -> int | None:
        """The pid of the server forked for `request` (None when fork fails: the stand-in starts it itself)."""
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:
            _run_server(request, fds, [self.listener, conn, *(c.conn for c in self.children.values())])
        return pid

    def _from_stand_in(self, child: _Child) -> None:
        """A signal to relay, or the stand-in gone (killed: its server goes with it)."""
        try:
            data = child.conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._kill(child, signal.SIGKILL)
            self.selector.unregister(child.conn)
            return
        for line in data.decode(errors="replace").splitlines():
            words = line.split()
            number = words[1] if len(words) == 2 and words[0] == "signal" else ""
            # a number of ASCII digits that names a signal: `signal 99` or `signal ²` is ignored
            if number.isascii() and number.isdigit() and int(number) in signal.valid_signals():
                self._kill(child, int(number))

    def _kill(self, child: _Child, sig: int) -> None:
        if child.pid in self.children:
            with contextlib.suppress(OSError):  # gone, or not ours: nothing a stand-in says stops the launcher
                os.killpg(child.pid, sig)

    def _reap(self) -> None:
        """Tell each ended server's stand-in its exit code, and kill what the server left in its group."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # its engine process, if it outlived the server
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                child.conn.sendall(f"exit {code if code >= 0 else 128 - code}\n".encode())
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(child.conn)
            child.conn.close()


def main(path: str) -> None:
    """Listen on `path` at once (a request waits in the backlog while vLLM is imported), import vLLM's
    server, then fork servers until SIGTERM."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    vllm_entry._fork_after_config()
    importlib.import_module(vllm_entry.VLLM_SERVER)
    print(f"autorl launcher: vLLM imported, serving {path}", flush=True)
    try:
        Launcher(listener).run()
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


@dataclass
class RunningLauncher:
    """A launcher this process started (`start_launcher`): stop it with `stop`."""

    process: subprocess.Popen
    directory: Path

    @property
    def socket_path(self) -> str:
        return str(self.directory / "socket")

    def stop(self) -> None:
        """End the launcher (its servers end with it) and forget it in this process's environment."""
        if os.environ.get(LAUNCHER_ENV) == self.socket_path:
            del os.environ[LAUNCHER_ENV]
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def start_launcher() -> RunningLauncher:
    """Start a launcher (with what the servers it forks have in common, `shared_environment`) and name it in this process's environment (`LAUNCHER_ENV`), so the servers this process and its children
    start go through it. It ends with this process; its log is `launcher.log` beside its socket."""
    directory = Path(tempfile.mkdtemp(prefix="autorl-launcher-"))  # mode 0700
    with open(directory / "launcher.log", "wb") as log:
        process = subprocess.Popen(
            wrapped([sys.executable, "-m", __name__, str(directory / "socket")]),  # dies with this process
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=shared_environment(),
            start_new_session=True,
        )
    launcher = RunningLauncher(process, directory)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not Path(launcher.socket_path).is_socket():
        if process.poll() is not None or time.monotonic() > deadline:
            tail = (directory / "launcher.log").read_text(errors="replace")[-2000:]
            launcher.stop()
            raise ServerStartError(f"the vLLM launcher did not start; the end of its log:\n{tail}")
        time.sleep(0.05)
    os.environ[LAUNCHER_ENV] = launcher.socket_path
    return launcher


if __name__ == "__main__":
    main(sys.argv[1])
