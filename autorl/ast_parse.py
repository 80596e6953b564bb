"""`ast.parse` made safe on CPythons whose AST constructor keeps its recursion counter in state shared by threads
and by nested parses (gh-106905, fixed in 3.11.8 and 3.12.2): there a garbage collection inside the constructor
runs finalizers, which may switch threads (another thread's parse: DSPy parses in the threads that answer its
calls) or parse in the same thread (a finalizer's exception or an asyncio task's error is formatted, and 3.11's
traceback formatting parses the source line), and the outer parse then fails with "SystemError: AST constructor
recursion depth mismatch" at random. `import autorl` applies `guard()`, so every parse of the library, of
pipelines/ and of the test suite runs guarded."""

from __future__ import annotations

import ast
import gc
import sys
import threading
from typing import Any


def affected(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this CPython has the shared counter (before 3.11.8, and 3.12.0-3.12.1)."""
    return version < (3, 11, 8) or (3, 12) <= version < (3, 12, 2)


def guard() -> None:
    """Replace `ast.parse` (once, and only where `affected`) by one that parses one thread at a time with garbage
    collection paused: with collection paused no finalizer runs inside the constructor; the lock keeps one
    thread's pause from being lifted by another's; it is re-entrant, so a parse inside a parse (a hook that runs
    from a collection just before one) goes on instead of waiting on itself."""
    parse = ast.parse
    if not affected() or getattr(parse, "guarded", False):
        return
    lock = threading.RLock()

    def guarded(*args: Any, **kwargs: Any) -> ast.AST:
        with lock:
            collecting = gc.isenabled()
            gc.disable()
            try:
                return parse(*args, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    guarded.guarded = True  # type: ignore[attr-defined]
    ast.parse = guarded  # type: ignore[assignment]
