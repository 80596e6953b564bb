"""A full disk, for real: a size-limited tmpfs (mounting needs root; elsewhere the test is skipped), filled up."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]).returncode == 0


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path`, unmounted afterwards; the test is skipped where mounting needs root."""
    if not mount_tmpfs(path, size):
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` up to `leave` free bytes with one file; removing it frees the space."""
    stat = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(stat.f_bavail * stat.f_frsize - leave, 0))
    return filler
