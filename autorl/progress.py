"""Long waits said on stderr: a bar for counted work (`progress_bar`; `gather_counted` awaits many things at once
under one), a status line for a wait with no count (`waiting`: a server starting). On a terminal they redraw in place (tqdm); anywhere else (a log file, CI, a
pipe) they print a plain line when they start, every `PLAIN_EVERY_S` seconds while they last, and when they
end, so a log says what a run was doing at any minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Awaitable, Iterable, Iterator
from typing import Any, TextIO, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
PLAIN_EVERY_S = 10.0
"""Seconds between two plain progress lines when stderr is not a terminal."""


def _interactive(stream: TextIO) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


class _PlainBar:
    """A progress bar as plain lines: `desc: done/total unit` at most every `PLAIN_EVERY_S`, and at the end."""

    def __init__(self, desc: str, total: int | None, unit: str, stream: TextIO):
        self.desc, self.total, self.unit, self.stream = desc, total, unit, stream
        self.n = 0
        self.postfix = ""
        self.started = self._last = time.monotonic()
        self._print()

    def _print(self, final: bool = False) -> None:
        count = f"{self.n}/{self.total}" if self.total else str(self.n)
        elapsed = time.monotonic() - self.started
        tail = f", {self.postfix}" if self.postfix else ""
        print(
            f"{self.desc}: {count} {self.unit}s{tail} ({elapsed:.0f}s{', done' if final else ''})",
            file=self.stream,
            flush=True,
        )
        self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self._last >= PLAIN_EVERY_S:
            self._print()

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        self.postfix = text

    def close(self) -> None:
        self._print(final=True)


def progress_bar(desc: str | None, total: int | None, unit: str, stream: TextIO | None = None) -> Any:
    """A bar with `update(n)`, `set_postfix_str(text)` and `close()`; `desc` None: nothing is shown."""
    stream = stream or sys.stderr
    if desc is None or _interactive(stream):
        return tqdm(total=total or None, desc=desc, unit=unit, disable=desc is None, file=stream)
    return _PlainBar(desc, total, unit, stream)


async def gather_counted(awaitables: Iterable[Awaitable[T]], desc: str | None, unit: str) -> list[T]:
    """Await `awaitables` concurrently under one bar (`progress_bar`) that counts each as it finishes, and
    return their results in input order; the first exception is raised, as `asyncio.gather` raises it."""
    waits = list(awaitables)
    bar = progress_bar(desc, len(waits), unit)

    async def counted(awaitable: Awaitable[T]) -> T:
        result = await awaitable
        bar.update(1)
        return result

    try:
        return await asyncio.gather(*(counted(a) for a in waits))
    finally:
        bar.close()


@contextlib.contextmanager
def waiting(message: str, stream: TextIO | None = None) -> Iterator[None]:
    """Say `message` for as long as the body runs: a ticking line on a terminal, else a line at the start,
    every `PLAIN_EVERY_S` seconds and at the end, each with the seconds so far."""
    stream = stream or sys.stderr
    started = time.monotonic()
    if _interactive(stream):
        bar = tqdm(total=None, desc=message, bar_format="{desc} {elapsed}", file=stream, leave=False)
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(1.0):
                bar.refresh()

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            bar.close()
        return
    ended = "stopped after"
    print(f"{message} ...", file=stream, flush=True)
    stop = threading.Event()

    def say() -> None:
        while not stop.wait(PLAIN_EVERY_S):
            print(f"{message}: {time.monotonic() - started:.0f}s", file=stream, flush=True)

    ticker = threading.Thread(target=say, daemon=True)
    ticker.start()
    try:
        yield
        ended = "done in"
    finally:
        stop.set()
        ticker.join()
        print(f"{message}: {ended} {time.monotonic() - started:.0f}s", file=stream, flush=True)
