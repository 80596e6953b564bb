"""`limit_concurrency`: at most N calls of an async function at once (ART's `art.utils.limit_concurrency`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def limit_concurrency(
    n: int, derive_key: Callable[..., str] | None = None
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """A decorator: at most `n` calls of the async function run at once; the others wait their turn.

    derive_key: called with each call's arguments; calls of different keys are limited separately (e.g. `n`
        requests per judge model). None: one limit for every call.
    """
    if n < 1:
        raise ValueError(f"limit_concurrency: n must be at least 1, got {n}")
    semaphores: dict[str, asyncio.Semaphore] = {}

    def decorator(func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(func)
        async def limited(*args: P.args, **kwargs: P.kwargs) -> Any:
            key = derive_key(*args, **kwargs) if derive_key is not None else ""
            async with semaphores.setdefault(key, asyncio.Semaphore(n)):
                return await func(*args, **kwargs)

        return limited

    return decorator
