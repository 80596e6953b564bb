"""Atomic writes: a file or a directory appears whole under its name, or not at all (a killed process
leaves a hidden temporary beside it, never a half-written file). A write that fails because the disk is
full raises one `DiskFullError` line naming the path; the previous file or directory is untouched."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import DiskFullError

FULL_BELOW_BYTES = 1 << 20
"""A write that failed on a filesystem with less free space than this failed for lack of it: torch and
safetensors report a full disk as a failed write without ENOSPC, so the filesystem is asked."""


def _disk_full(exc: BaseException, directory: Path) -> bool:
    """Whether `exc`, raised while writing in `directory`, came from a full disk (or quota)."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    try:
        stat = os.statvfs(directory)
    except OSError:  # e.g. the directory does not exist: that error is the one to show
        return False
    return stat.f_bavail * stat.f_frsize < FULL_BELOW_BYTES


@contextmanager
def _full_disk_is_one_line(path: Path) -> Iterator[None]:
    try:
        yield
    except Exception as exc:  # torch: RuntimeError, safetensors: SafetensorError, the rest: OSError
        if not _disk_full(exc, path.parent):
            raise
        raise DiskFullError(
            f"disk full while writing {path}; nothing was half-written: free space there and rerun the same command"
        ) from exc


def atomic_file(path: Path, write: Callable[[Path], object]) -> None:
    """Call `write(tmp)` with a temporary path beside `path` and rename the result onto `path`."""
    path = Path(path)
    with _full_disk_is_one_line(path):
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            write(tmp)
            tmp.chmod(0o644)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def atomic_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    atomic_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


@contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a temporary directory beside `target` to fill; when the block ends without an error it
    replaces `target` (a previous, possibly incomplete, `target` is removed first)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _full_disk_is_one_line(target):
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            yield tmp
            tmp.chmod(0o755)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
