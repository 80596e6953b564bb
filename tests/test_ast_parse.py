"""`autorl.ast_parse`: parses that a garbage collection, another thread or a nested parse cannot break on a
CPython with gh-106905 (3.11.7 is CI's)."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
import threading
import time

import pytest

import autorl  # noqa: F401  (what guards the parse)
from autorl.ast_parse import affected


def test_the_affected_versions_are_those_before_the_fix():
    assert affected((3, 11, 7)) and affected((3, 12, 1)) and affected((3, 10, 14))
    assert not affected((3, 11, 8)) and not affected((3, 12, 2)) and not affected((3, 13, 0))


def test_importing_autorl_guards_the_parse_only_where_the_interpreter_needs_it():
    guarded = subprocess.run(
        [sys.executable, "-c", "import ast, autorl; print(getattr(ast.parse, 'guarded', False))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert guarded == str(affected())


class _YieldsWhenCollected:
    """Garbage in a reference cycle whose finalizer lets another thread run: a collection that happens inside
    the AST constructor switches threads there."""

    def __init__(self):
        self.cycle = self

    def __del__(self):
        time.sleep(0)


class _RaisesWhenCollected:
    """Garbage whose finalizer raises: the interpreter hands the exception to `sys.unraisablehook`, which under
    pytest formats its traceback, and formatting a traceback parses the source line (`ast.parse`) in the thread
    that collected, which may be inside `ast.parse` already."""

    def __init__(self):
        self.cycle = self

    def __del__(self):
        raise RuntimeError("a finalizer that fails")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_threads_parse_at_once_while_garbage_is_collected():
    """DSPy's answering threads parse while garbage is collected; on CPython 3.11.7 that raised "AST constructor
    recursion depth mismatch" (gh-106905), which `autorl.ast_parse` rules out by parsing one thread at a time; and a
    collection inside a parse that parses again in the same thread (the hook of a finalizer's exception) goes on,
    where a plain lock waited on itself for ever."""
    errors: list[SystemError] = []

    def parse() -> None:
        for round_ in range(20):
            for _ in range(5):
                _YieldsWhenCollected()
            if round_ % 5 == 0:
                _RaisesWhenCollected()
            try:
                ast.parse("a.b[1].c(d, e=[f, g, (h, i)])\n" * 400)
            except SystemError as exc:
                errors.append(exc)
                return

    threshold = gc.get_threshold()
    gc.set_threshold(10)  # collect often, so collections fall inside the constructor
    try:
        threads = [threading.Thread(target=parse, daemon=True) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        gc.set_threshold(*threshold)
    assert not any(thread.is_alive() for thread in threads), "a parsing thread waits on the lock it holds"
    assert errors == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_parse_in_one_thread_survives_a_collection_whose_finalizer_error_is_formatted():
    """What failed in CI in a test that only parsed files: a collection inside the constructor ran a finalizer that
    raised, pytest's hook formatted the exception, 3.11's traceback formatting parsed its source line, and the
    outer parse ended with the recursion depth mismatch."""
    threshold = gc.get_threshold()
    gc.set_threshold(10)
    try:
        for _ in range(40):
            for _garbage in range(5):
                _RaisesWhenCollected()
            ast.parse("a.b[1].c(d, e=[f, g, (h, i)])\n" * 400)
    finally:
        gc.set_threshold(*threshold)
