"""Atomic writes: a file or a directory appears whole under its name, or not at all (a killed process
leaves a hidden temporary beside it, never a half-written file). A write that fails because the disk is
full raises one `DiskFullError` line naming the path; the previous file or directory is untouched. What they
write gets the modes a plain write would: the user's umask decides (`umask 077`: no one else reads it).
`private_dir` makes the directories that hold a user's task and results: only the user may enter them."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import threading
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
def _temporary(path: Path, make: Callable[[], Path], remove: Callable[[Path], object]) -> Iterator[Path]:
    """The temporary that `make()` creates beside `path`, for the block to fill and rename onto `path`;
    `remove` deletes it when the block ends (a no-op once renamed). An error from a full disk is raised as
    one `DiskFullError` line; the disk is asked before the temporary is removed, as the temporary holds
    the space the write took (torch reports a full disk as a failed write, without ENOSPC)."""
    try:
        tmp = make()
    except OSError as exc:
        if _disk_full(exc, path.parent):
            raise DiskFullError(_full_message(path)) from exc
        raise
    try:
        yield tmp
    except Exception as exc:  # torch: RuntimeError, safetensors: SafetensorError, the rest: OSError
        full = _disk_full(exc, path.parent)
        remove(tmp)
        if full:
            raise DiskFullError(_full_message(path)) from exc
        raise
    finally:
        remove(tmp)


def _full_message(path: Path) -> str:
    return f"disk full while writing {path}; nothing was half-written: free space there and rerun the same command"


_umask_lock = threading.Lock()


def umask() -> int:
    """The process's umask (read from /proc where it is shown, else set and restored under a lock)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _umask_lock:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def private_dir(path: Path) -> Path:
    """Make directory `path` and its missing parents with mode 0700 (the umask may take more away): a directory
    that holds a user's task, records or results is not readable by other users unless they open it themselves.
    A directory that exists is left as it is."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            directory.mkdir(mode=0o700)
    return path


def _new_file(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def atomic_file(path: Path, write: Callable[[Path], object]) -> None:
    """Call `write(tmp)` with a temporary path beside `path` and rename the result onto `path`."""
    path = Path(path)
    with _temporary(path, lambda: _new_file(path), lambda tmp: tmp.unlink(missing_ok=True)) as tmp:
        write(tmp)
        tmp.chmod(0o666 & ~umask())  # mkstemp made it 0600: the modes a plain write would give
        os.replace(tmp, path)


def atomic_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    atomic_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


@contextmanager
def atomic_dir(target: Path, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary directory beside `target` to fill; when the block ends without an error it
    replaces `target` (a previous, possibly incomplete, `target` is removed first). replace=False: a `target`
    that appeared meanwhile (a user's directory, another export's) is kept and `FileExistsError` raised, the
    temporary removed."""
    target = Path(target)

    def make() -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))

    with _temporary(target, make, lambda tmp: shutil.rmtree(tmp, ignore_errors=True)) as tmp:
        yield tmp
        tmp.chmod(0o777 & ~umask())  # mkdtemp made it 0700: the modes a plain mkdir would give
        if target.exists() or target.is_symlink():
            if not replace:
                raise FileExistsError(errno.EEXIST, "made while the directory was written", str(target))
            shutil.rmtree(target)
        os.replace(tmp, target)
