"""Start a vLLM server by asking a launcher (`autorl.serving.launcher`) to fork it, and stand in for it.

    python .../autorl/serving/launcher_attach.py SOCKET -- COMMAND ARGS...

COMMAND is the server's own command line (`VLLMServer.command`). This process sends it, with its environment,
working directory and standard streams, to the launcher listening on SOCKET, which forks a server from a
process that has vLLM imported already; this process then lives as long as that server, so whoever started it
sees a server process as before: a signal it gets (SIGTERM, SIGINT) goes to the server's process group, and it
exits with the server's exit code. If it is itself killed, the launcher sees its connection close and kills the
server's group. It sends its environment (keys included) and streams only to a launcher of its own user: the
socket's directory must be this user's, mode 0700 (as `start_launcher` makes it), and the process listening on
it this user's (SO_PEERCRED), so a path another local user re-created after the launcher ended gets nothing.
When no launcher answers, or it is not this user's, or it cannot run COMMAND as it would run (another Python,
another autorl, other preloaded libraries), it runs COMMAND itself (exec): a start as slow as before, never a
failed one. It runs as a script (by path, like `die_with_parent.py`) and imports nothing but the standard library,
so it costs a bare interpreter's start.
"""

import contextlib
import json
import os
import select
import signal
import socket
import stat
import struct
import sys
import time

KILL_AFTER_S = 3.5
"""How long after forwarding SIGTERM this process waits before it forwards SIGKILL: inside the supervisor's
grace (`die_with_parent.GRACE_S`), so the server is gone when this process exits."""


def request(command: list[str]) -> bytes:
    """The launch request: the command, environment and working directory, length-prefixed JSON."""
    body = json.dumps({"argv": command, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    return struct.pack("!I", len(body)) + body


class Lines:
    """The lines the launcher sends on a connection, read as they come (`next_line` waits at most `timeout`)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buffer = conn, b""

    def next_line(self, timeout: float | None = None) -> str | None:
        """The next line ("" once the launcher closed the connection), or None when `timeout` passed first."""
        while b"\n" not in self.buffer:
            if not select.select([self.conn], [], [], timeout)[0]:
                return None
            chunk = self.conn.recv(4096)
            if not chunk:
                return ""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


def not_ours(path: str, conn: socket.socket) -> str | None:
    """Why the launcher listening on `path` (connected on `conn`) may be another user's; None when it is this
    user's: its directory this user's and mode 0700, its listener this user's process."""
    directory = os.stat(os.path.dirname(os.path.abspath(path)))
    if directory.st_uid != os.getuid() or stat.S_IMODE(directory.st_mode) != 0o700:
        return f"its directory is not this user's with mode 0700 (uid {directory.st_uid}, mode {directory.st_mode:o})"
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid():
        return f"it is another user's (uid {uid})"
    return None


def connect(path: str, command: list[str]) -> tuple[socket.socket, Lines] | str:
    """The connection to the launcher once it has forked the server, or why it cannot launch `command` (nothing
    is sent to a launcher that is not this user's: `not_ours`)."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        if reason := not_ours(path, conn):
            conn.close()
            return f"the launcher at {path} is not trusted: {reason}"
        socket.send_fds(conn, [request(command)], [0, 1, 2])
        lines = Lines(conn)
        answer = lines.next_line() or ""
    except OSError as exc:
        return f"no launcher at {path} ({exc})"
    if not answer.startswith("pid "):
        return f"the launcher declined: {answer.removeprefix('declined ') or 'it closed the connection'}"
    return conn, lines


def stand_in(conn: socket.socket, lines: Lines) -> int:
    """Forward SIGTERM and SIGINT to the server until the launcher reports its exit code; return that code. A
    server still there `KILL_AFTER_S` after the first forwarded signal gets SIGKILL."""
    kill_at: list[float] = []

    def forward(signum: int, frame: object) -> None:
        kill_at.append(time.monotonic() + KILL_AFTER_S)
        with contextlib.suppress(OSError):  # a launcher gone took its servers with it
            conn.sendall(f"signal {signum}\n".encode())

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    while True:
        line = lines.next_line(timeout=0.5)
        if line is None:
            if kill_at and time.monotonic() > kill_at[0]:
                with contextlib.suppress(OSError):
                    conn.sendall(f"signal {int(signal.SIGKILL)}\n".encode())
                kill_at[0] = float("inf")
        elif not line:  # the launcher died, and the kernel killed its servers with it
            return 1
        elif line.startswith("exit "):
            return int(line.split()[1])


def main(argv: list[str]) -> int:
    path, separator, command = argv[0], argv[1], argv[2:]
    if separator != "--" or not command:
        print("usage: launcher_attach.py SOCKET -- COMMAND ARGS...", file=sys.stderr)
        return 2
    connected = connect(path, command)
    if isinstance(connected, str):
        print(f"autorl: {connected}; starting the server directly", file=sys.stderr, flush=True)
        os.execv(command[0], command)
    return stand_in(*connected)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
