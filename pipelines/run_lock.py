"""One process at a time per run name and per training directory.

A lock is an exclusive `flock` on a file in `<home>/locks/` (outside the directories it guards, which
`--force` may delete). The kernel drops it when the holding process exits, however it exits, so a
killed run never leaves a stuck lock. The file holds the holder's pid and start time, for the refusal
message; its content means nothing once the lock is free.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autorl.backends.run_dir import ensure_writable
from autorl.errors import AutoRLError

LOCKS = "locks"
"""The directory under the home that holds the lock files."""


class RunLockedError(AutoRLError):
    """Another live process holds the lock of a run or of the training directory it would write."""


@contextmanager
def exclusive(path: Path, what: str, advice: str) -> Iterator[None]:
    """Hold the lock file `path` (its directory exists) for the block; `RunLockedError` (naming `what` and
    `advice`) when another process holds it. The file descriptor is not inherited by child processes
    (servers), so the lock ends with this process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise RunLockedError(f"{what} is in use by {holder}; {advice}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "since": time.time()}).encode(), 0)
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


@contextmanager
def run_locks(home: Path, name: str, train_key: str) -> Iterator[None]:
    """The locks of one `autorl run`: its run name, then the training it writes (another run name with
    the same training settings shares that training directory)."""
    locks = home / LOCKS
    ensure_writable(locks)
    with (
        exclusive(locks / f"run-{name}.lock", f"run {name!r}", "wait for it to finish, or choose another --name"),
        exclusive(
            locks / f"train-{train_key}.lock",
            f"training {train_key} (another run with the same settings)",
            "wait for that run to finish; it trains exactly what this one would",
        ),
    ):
        yield
