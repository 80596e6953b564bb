"""Run a command that ends when the process that started it dies.

Both ways below ask the kernel for SIGTERM on the death of their parent (prctl PR_SET_PDEATHSIG, which
survives exec). The file runs as a script, not as `-m autorl...`, because the child's environment need not
let it import autorl: it imports nothing of it.

- `python .../autorl/die_with_parent.py COMMAND ARGS...` becomes COMMAND (exec). autorl's stdio MCP servers
  start so: the server is the process that holds the client's pipes, so its end is seen at once.
- `python .../autorl/die_with_parent.py --group COMMAND ARGS...` stays, as the leader of its own process
  group, the parent of COMMAND: on SIGTERM or SIGINT (its parent's death included) it sends SIGTERM to the
  group, waits `GRACE_S`, then SIGKILLs what is left of it; when COMMAND ends by itself it SIGKILLs what
  COMMAND left in the group and exits with COMMAND's code; if the supervisor itself is SIGKILLed, the kernel
  SIGKILLs COMMAND (what COMMAND started is then left). autorl's vLLM servers start so: a vLLM server can
  hang in its own shutdown on SIGTERM, and the engine processes it starts do not see autorl die
  (benchmarks/perf/faults.py found servers left running after a SIGKILLed run).
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

GRACE_S = 4.0
"""How long `--group` lets the group shut down on SIGTERM before it SIGKILLs what is left."""


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel for `sig` when the parent process dies (run in a child, before exec)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


def wrapped(command: list[str], group: bool = False) -> list[str]:
    """The command line that runs `command` through this file (`group`: as the supervisor of its group)."""
    return [sys.executable, str(Path(__file__).resolve()), *(["--group"] if group else []), *command]


def group_members() -> list[int]:
    """The other live processes of this process's group."""
    pgrp, me, members = os.getpgrp(), os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgrp and state != "Z":
            members.append(int(entry))
    return members


def kill_members(sig: int) -> None:
    for pid in group_members():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def supervise(command: list[str]) -> int:
    """Run `command` in this process's group and end the whole group with it; returns its exit code."""
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)
    stop: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        # SIGKILL for the command if this supervisor is SIGKILLed (Ray does so to an actor's children)
        child = subprocess.Popen(command, preexec_fn=lambda: die_with_parent(signal.SIGKILL))
    except OSError as exc:
        print(f"cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    while child.poll() is None and not stop:
        time.sleep(0.2)
    if stop:
        kill_members(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while group_members() and time.monotonic() < deadline:  # an unreaped child counts as ended
            time.sleep(0.1)
    kill_members(signal.SIGKILL)
    code = child.wait()
    return 128 + stop[0] if stop else (code if code >= 0 else 128 - code)


if __name__ == "__main__":
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(1)
    group = sys.argv[1:2] == ["--group"]
    command = sys.argv[2:] if group else sys.argv[1:]
    if group:
        sys.exit(supervise(command))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"cannot run {command[0]!r}: {exc}", file=sys.stderr)
        sys.exit(127)
