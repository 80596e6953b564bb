"""Blocking calls on daemon threads, as futures of the running event loop (`in_daemon_thread`) or waited for up to a
deadline (`in_time`): unlike `asyncio.to_thread`, nothing (neither the loop nor the interpreter's exit) waits for a
call once its caller has given up on it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


def in_daemon_thread(fn: Callable[[], Any], name: str | None = None, stay: bool = False) -> asyncio.Future:
    """`fn()` on a daemon thread; its result or error is the returned future's. An error that is no `Exception`
    (nor `SystemExit`) arrives as a `RuntimeError`, so a call cannot end its caller as Ctrl-C would. stay: the
    thread lives on as long as the process after `fn` returns: a process `fn` started under PR_SET_PDEATHSIG
    (`autorl.serving.die_with_parent`) gets its signal when the thread that started it ends."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    future.add_done_callback(lambda f: f.cancelled() or f.exception())  # a result nobody awaits is no warning

    def settle(outcome: Any, failed: bool) -> None:
        if not future.done():
            future.set_exception(outcome) if failed else future.set_result(outcome)

    def work() -> None:
        try:
            outcome, failed = fn(), False
        except BaseException as exc:
            outcome, failed = (exc if isinstance(exc, Exception | SystemExit) else RuntimeError(repr(exc))), True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for this call any more
            loop.call_soon_threadsafe(settle, outcome, failed)
        if stay:
            threading.Event().wait()

    threading.Thread(target=work, name=name or getattr(fn, "__name__", "background"), daemon=True).start()
    return future


def in_time(fn: Callable[[], Any], timeout_s: float) -> Any:
    """`fn()`'s result (or error) when it returns within `timeout_s`, else `TimeoutError`: a blocking call whose
    caller must not wait past a deadline (a server that answers a byte at a time), from sync code that may run
    inside an event loop. `fn` runs on a daemon thread, left to end by itself when the deadline passes."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = fn()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=work, name=getattr(fn, "__name__", "in_time"), daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
