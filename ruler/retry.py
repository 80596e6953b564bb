"""Retrying a judge call with exponential backoff: which failures are worth another attempt, and when."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import openai
from pydantic import BaseModel, Field

from .errors import JudgeFailedError
from .scores import InvalidAnswer

log = logging.getLogger("ruler")
T = TypeVar("T")

RETRYABLE_STATUS = {408, 409, 429}
"""HTTP statuses below 500 that say "try again later" (timeout, conflict, rate limit)."""


class RetryPolicy(BaseModel):
    """How often and how patiently RULER asks the judge again after a failed attempt."""

    max_attempts: int = Field(5, ge=1)
    """Attempts per group, the first one included."""
    initial_backoff_s: float = Field(1.0, ge=0)
    """Wait before the second attempt; each further wait doubles, up to `max_backoff_s`."""
    max_backoff_s: float = Field(30.0, ge=0)
    """Longest wait between two attempts."""
    jitter: float = Field(0.25, ge=0, le=1)
    """Each wait is stretched by a random fraction up to this, so concurrent groups do not retry in lockstep."""

    def backoff_s(self, failed_attempts: int) -> float:
        """The wait after `failed_attempts` failures (1 for the wait before the second attempt)."""
        base = min(self.initial_backoff_s * 2 ** (failed_attempts - 1), self.max_backoff_s)
        return base * (1 + self.jitter * random.random())


def is_retryable(exc: BaseException) -> bool:
    """Invalid answers, timeouts, lost connections, rate limits and server errors are retried; the rest is not."""
    if isinstance(exc, InvalidAnswer | openai.APIConnectionError | asyncio.TimeoutError):
        return True
    status = getattr(exc, "status_code", None) if isinstance(exc, openai.APIError) else None
    return isinstance(status, int) and (status in RETRYABLE_STATUS or status >= 500)


def describe(exc: BaseException) -> str:
    """One line naming the failure, for logs and error messages."""
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line[:300]}"


async def call_with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str) -> tuple[T, int]:
    """Run `call` until it succeeds or fails for good; returns its result and the attempts it took.

    Raises `JudgeFailedError` (with `.attempts`, its cause chained) at once for a failure that is not
    retryable, or after `policy.max_attempts`.
    """
    attempt = 1
    while True:
        try:
            return await call(), attempt
        except Exception as exc:
            if not is_retryable(exc) or attempt == policy.max_attempts:
                failure = (
                    f"{what} failed and will not be retried: {describe(exc)}"
                    if not is_retryable(exc)
                    else f"{what} failed {attempt} times; last failure: {describe(exc)}"
                )
                error = JudgeFailedError(failure)
                error.attempts = attempt
                raise error from exc
            wait = policy.backoff_s(attempt)
            log.warning("%s: attempt %d failed (%s); retrying in %.2fs", what, attempt, describe(exc), wait)
            await asyncio.sleep(wait)
            attempt += 1
