"""Run a command that the kernel stops when the process that started it dies.

`python .../autorl/die_with_parent.py COMMAND ARGS...` asks the kernel for SIGTERM on the death of its
parent (prctl PR_SET_PDEATHSIG, which survives exec), then becomes COMMAND. autorl starts its stdio MCP
servers through it, so no server outlives a crashed or killed autorl. It runs as a file, not as
`-m autorl...`, because the child's environment need not let it import autorl: it imports nothing of it.
"""

import ctypes
import os
import signal
import sys


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent process dies (run in a child, before exec; also the
    `preexec_fn` of the vLLM servers)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


if __name__ == "__main__":
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(1)
    command = sys.argv[1:]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"cannot run {command[0]!r}: {exc}", file=sys.stderr)
        sys.exit(127)
