"""autorl's home: the directory a run (`autorl run`) or a server (`autorl serve`) keeps its files in, and the
locks that keep one process at a time on what is in it.

A lock is an exclusive `flock` on a file (outside the directories it guards, which `--force` may delete).
The kernel drops it when the holding process exits, however it exits, so a killed process never leaves a
stuck lock. The file holds the holder's pid and start time, for the refusal message; its content means
nothing once the lock is free.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import AutoRLError

DEFAULT_HOME = Path(".autorl")
"""Where runs, the artifact cache and served models live unless `--home` or AUTORL_HOME says otherwise."""


class LockedError(AutoRLError):
    """Another live process holds a lock: of a run name, of the training directory a run would write, or of an
    `autorl serve` home."""


@contextmanager
def exclusive(path: Path, what: str, advice: str) -> Iterator[None]:
    """Hold the lock file `path` (its directory exists) for the block; `LockedError` (naming `what` and
    `advice`) when another process holds it. The file descriptor is not inherited by child processes
    (servers), so the lock ends with this process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise LockedError(f"{what} is in use by {holder}; {advice}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "since": time.time()}).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def waiting_for(path: Path) -> Iterator[None]:
    """Hold the lock file `path` (its directory exists) for the block, waiting while another process holds it:
    for work one process does and the others then reuse, such as converting the embedded model on first use."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    try:
        held = json.loads(os.pread(fd, 200, 0))
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(held["since"]))
        return f"process {held['pid']} (since {since})"
    except (ValueError, KeyError, TypeError):  # written a moment ago, not yet complete
        return "another process"
