"""`retry`: call a sync or async function again when it raises, with exponential backoff (ART's `art.retry`)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("autorl")
P = ParamSpec("P")
R = TypeVar("R")


def retry(
    max_attempts: int = 3,
    delay: float = 0.25,
    backoff_factor: float = 2.0,
    exceptions: tuple[type[BaseException], ...] = (Exception,),
    on_retry: Callable[[BaseException, int], object] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator that calls the function again when it raises one of `exceptions`.

    max_attempts: calls in all, the first included; the last one's exception propagates.
    delay: seconds before the second call; each further wait is `backoff_factor` times the one before.
    exceptions: what is retried; anything else propagates at once.
    on_retry: called with the exception and the attempt that failed (1 for the first) before each wait;
        without it, each retry is a warning on the `autorl` logger.

    Works on `def` and `async def` functions (an async one sleeps without blocking the event loop).
    """
    if max_attempts < 1:
        raise ValueError(f"retry: max_attempts must be at least 1, got {max_attempts}")

    def report(func: Callable[..., Any], exc: BaseException, attempt: int) -> None:
        if on_retry is not None:
            on_retry(exc, attempt)
        else:
            name = getattr(func, "__name__", repr(func))
            log.warning("retry %d/%d of %s after %s: %s", attempt, max_attempts, name, type(exc).__name__, exc)

    def waits() -> list[float]:
        return [delay * backoff_factor**n for n in range(max_attempts - 1)]

    def decorator(func: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                for attempt, wait in enumerate(waits(), 1):
                    try:
                        return await func(*args, **kwargs)
                    except exceptions as exc:
                        report(func, exc, attempt)
                        await asyncio.sleep(wait)
                return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def sync_wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            for attempt, wait in enumerate(waits(), 1):
                try:
                    return func(*args, **kwargs)
                except exceptions as exc:
                    report(func, exc, attempt)
                    time.sleep(wait)
            return func(*args, **kwargs)

        return sync_wrapper

    return decorator
