"""What an `autorl serve` answers, read by a client that trusts none of it (`Connection`'s requests).

A server can be anyone's, or taken over: every answer is read as raw bytes up to a bound (an encoding the
client did not ask for is refused, so nothing inflates past it), JSON nested no deeper than `MAX_DEPTH`, an
error shown as one printable line, and a checkpoint archive unpacked as regular files and directories only,
each inside its target, with tarfile reading no more inflated bytes than the files may hold plus a little per
header (`Inflated`: a pax or GNU long-name header declaring hundreds of MiB is refused before it is read). Whatever
is wrong is one `AutoRLError` line naming the URL.
"""

from __future__ import annotations

import gzip
import json
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

import httpx

from ...atomic import atomic_dir
from ...errors import AutoRLError

MAX_ANSWER_BYTES = 64 * 2**20
"""The largest JSON answer a client reads (a long run's history is megabytes)."""
MAX_ERROR_BYTES = 64 * 1024
"""What a client reads of an error answer: its line is at most `MAX_LINE_CHARS` anyway."""
MAX_LINE_CHARS = 500
MAX_DEPTH = 64
"""The deepest nesting of a JSON answer a client takes (autorl's own answers nest a few levels)."""
MAX_MEMBERS = 1000
"""The most files and directories in one checkpoint archive (a LoRA adapter's checkpoint holds a handful)."""
MAX_PATH_CHARS = 1024
MAX_PART_CHARS = 255
HEADER_ALLOWANCE = 4096
"""Inflated bytes an archive may hold per member beyond its data: its header block, a pax or GNU long-name
header for a name of up to `MAX_PATH_CHARS`, and the padding to the next 512-byte block."""
COPY_BYTES = 16 * 1024
"""The chunk tarfile copies a member's data in (its `copybufsize`, set here so it is not a default's)."""
MAX_READ = 64 * 1024
"""The most tarfile may read at once: a member's data comes in `COPY_BYTES` chunks, so a larger read is an
extended header (pax, GNU long name) far longer than any name an archive may hold, and is refused unread."""
NOT_ASKED = "identity"
"""The only encoding a client asks for (Accept-Encoding): no answer inflates past what was counted."""


def printable(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """`text` as one line a terminal shows as it is: control characters (escapes included) as '?', whitespace
    runs as one space, at most `limit` characters."""
    line = " ".join("".join(c if c.isprintable() or c.isspace() else "?" for c in text[: limit * 2]).split())
    return line if len(line) <= limit else line[:limit] + "..."


def check_encoding(response: httpx.Response, where: str) -> None:
    """One line when the answer is encoded (gzip, br, ...) though the client asked for `NOT_ASKED` only."""
    encoding = response.headers.get("content-encoding", NOT_ASKED).strip().lower()
    if encoding not in ("", NOT_ASKED):
        raise AutoRLError(
            f"autorl server {where}: the answer is {printable(encoding, 40)!r}-encoded though this client asked for "
            "none; is it an autorl server?"
        )


async def read_into(response: httpx.Response, write: Callable[[bytes], object], limit: int) -> bool:
    """Write the answer's raw bytes with `write`, at most `limit` of them; whether there were more (the rest
    is not read)."""
    seen = 0
    async for chunk in response.aiter_raw():
        write(chunk[: max(limit - seen, 0)])
        seen += len(chunk)
        if seen > limit:
            return True
    return False


def head(chunks: Iterator[bytes], limit: int) -> bytes:
    """The first `limit` bytes of `chunks` (a synchronous answer's), reading no further."""
    raw = bytearray()
    for chunk in chunks:
        raw += chunk[: limit - len(raw)]
        if len(raw) >= limit:
            break
    return bytes(raw)


def parsed_json(raw: bytes) -> Any:
    """`raw` as JSON; ValueError when it is not JSON, or nests deeper than `MAX_DEPTH`."""
    try:
        data = json.loads(raw)
    except RecursionError:  # the parser's own bound, far past MAX_DEPTH
        raise ValueError(f"nested deeper than {MAX_DEPTH}") from None
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ValueError(f"nested deeper than {MAX_DEPTH}")
            stack.extend((child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))
    return data


def error_line(raw: bytes, reason: str) -> str:
    """What a server's error answer `raw` says, in one printable line (`reason`, the status's phrase, when it
    says nothing)."""
    try:
        data = parsed_json(raw)
        text = str(data.get("error") or data)
    except (ValueError, AttributeError):
        text = raw.decode("utf-8", "replace")
    return printable(text) or printable(reason)


class Inflated:
    """The inflated stream of an archive as tarfile reads it, refusing (`AutoRLError`) to read or seek past
    `limit` bytes or to read more than `MAX_READ` at once: tarfile reads an extended header whole while it
    iterates, before any member can be checked, so this is what bounds the memory a hostile header takes."""

    def __init__(self, stream: IO[bytes], limit: int):
        self.stream, self.limit = stream, limit

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_READ:
            raise AutoRLError(f"holds a header of more than {MAX_READ} bytes")
        data = self.stream.read(size)
        if self.stream.tell() > self.limit:
            raise AutoRLError(f"inflates past {self.limit} bytes")
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0 and offset > self.limit:  # tarfile seeks from the start only
            raise AutoRLError(f"inflates past {self.limit} bytes")
        return self.stream.seek(offset, whence)

    def tell(self) -> int:
        return self.stream.tell()


def unpack(archive_file: IO[bytes], target: Path, max_bytes: int, where: str) -> None:
    """Unpack the .tar.gz in `archive_file` into the directory `target`, made whole or not at all: regular
    files and directories only, each inside it, at most `MAX_MEMBERS` of them and `max_bytes` in all, the
    inflated archive at most `max_bytes` plus `HEADER_ALLOWANCE` per member (`Inflated`); one `AutoRLError` line
    for an archive that is anything else."""
    limit = max_bytes + HEADER_ALLOWANCE * (MAX_MEMBERS + 2)  # and the end-of-archive blocks
    try:
        with (
            atomic_dir(target) as filling,
            gzip.GzipFile(fileobj=archive_file, mode="rb") as inflated,
            tarfile.open(fileobj=Inflated(inflated, limit), mode="r:", copybufsize=COPY_BYTES) as archive,
        ):
            members = checked_members(archive, max_bytes)
            archive.extractall(filling, members=members, filter="data")  # and the data filter's modes and checks
    except AutoRLError as exc:
        raise AutoRLError(f"autorl server {where}: the checkpoint archive {exc}") from None
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise AutoRLError(
            f"autorl server {where}: the checkpoint archive cannot be unpacked ({type(exc).__name__}: "
            f"{printable(str(exc), 200)})"
        ) from None


def checked_members(archive: tarfile.TarFile, max_bytes: int) -> list[tarfile.TarInfo]:
    """The archive's members, read one by one, when each is a regular file or directory whose name stays
    inside the target; else an `AutoRLError` saying which is not (read no further)."""
    members, size = [], 0
    for info in archive:
        name = printable(info.name, 80)
        if len(members) == MAX_MEMBERS:
            raise AutoRLError(f"holds more than {MAX_MEMBERS} files")
        if not (info.isreg() or info.isdir()):
            raise AutoRLError(f"holds {name!r}, which is not a file or directory (a link or a device)")
        path = PurePosixPath(info.name)
        if (
            path.is_absolute()
            or ".." in path.parts
            or len(info.name) > MAX_PATH_CHARS
            or any(len(part) > MAX_PART_CHARS for part in path.parts)
        ):
            raise AutoRLError(f"names {name!r}, a path outside its directory or too long")
        size += info.size
        if size > max_bytes:
            raise AutoRLError(f"unpacks past {max_bytes} bytes")
        members.append(info)
    if not any(info.isreg() for info in members):
        raise AutoRLError("holds no file")
    return members
