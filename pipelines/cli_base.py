"""What every `autorl` command shares: the error console, a user's mistake as one line, Ctrl-C and SIGTERM,
the event loop a command's coroutine runs on, the `--home` option of the commands that read runs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from autorl.errors import AutoRLError
from autorl.serving.lifetime import stop_all_servers
from ruler.errors import RulerError

from .cli_options import FieldFlag, flag_for

err = Console(stderr=True, soft_wrap=True)  # long lines (paths) stay whole in logs
T = TypeVar("T")
USER_ERRORS = (AutoRLError, RulerError)
"""Errors a user can cause, autorl's and its judge library's: each ends a command with its one line."""


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on a new event loop. Ctrl-C and SIGTERM (what schedulers and containers send) both
    cancel it: its `finally` blocks stop the servers and record the run, then KeyboardInterrupt is raised
    (see `exit_interrupted`)."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(coroutine)
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, task.cancel)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if leftover := asyncio.all_tasks(loop):
            for pending in leftover:
                pending.cancel()
            loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()  # unlike asyncio.run, does not wait for worker threads (see exit_interrupted)


def exit_interrupted(message: str) -> NoReturn:
    """Print `message` and end the process now, with status 1.

    The interrupted command's `finally` blocks have run. What can remain is a worker thread blocked in a
    model call (input generation runs in threads; one call can take minutes on CPU), which a normal
    exit would wait for: stop every server this process started and leave without waiting.
    """
    print_error(message)
    stop_all_servers()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def print_error(message: str) -> None:
    """The one error line a user sees."""
    err.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False)


def fail(message: str) -> None:
    print_error(message)
    raise typer.Exit(1)


@contextmanager
def user_errors(flags: list[FieldFlag], interrupted: str) -> Iterator[None]:
    """A command's body: a user's mistake ends in one error line (an invalid option value names its flag
    among `flags`), Ctrl-C in the line `interrupted`."""
    try:
        yield
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        fail(f"{flag_for(flags, first['loc'])}: {message}" if first["loc"] else message)
    except USER_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        exit_interrupted(interrupted)


HomeOption = Annotated[Path, typer.Option(envvar="AUTORL_HOME", help="Where runs and the artifact cache live.")]
"""The `--home` option of the commands that read runs (`run` takes it from RunConfig)."""
