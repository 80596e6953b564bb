"""Retrying a judge call with exponential backoff: which failures are worth another attempt, and when."""

from __future__ import annotations

import asyncio
import logging
import random
import time
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
    """Attempts per group while the judge answers but its answers are invalid (bad JSON, wrong ids), the
    first one included."""
    outage_s: float = Field(120.0, ge=0)
    """How long a judge that cannot answer (refused connections, timeouts, 429 and 5xx statuses) is tried
    again, from the first such failure: a shorter outage costs the step time, not its groups."""
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

    Invalid answers are asked again up to `policy.max_attempts` times; a judge that cannot answer is asked
    again until `policy.outage_s` have passed since its first such failure. Raises `JudgeFailedError`
    (with `.attempts`, its cause chained) at once for a failure that is not retryable, or when the budget
    of the failure's kind is spent.
    """
    attempt = invalid = 0
    outage_since: float | None = None
    while True:
        attempt += 1
        try:
            return await call(), attempt
        except Exception as exc:
            wait = policy.backoff_s(attempt)
            if not is_retryable(exc):
                failure = f"{what} failed and will not be retried: {describe(exc)}"
            elif isinstance(exc, InvalidAnswer):
                invalid += 1
                spent = invalid >= policy.max_attempts
                failure = f"{what} failed {attempt} times; last failure: {describe(exc)}" if spent else None
            else:
                outage_since = outage_since or time.monotonic()
                down_s = time.monotonic() - outage_since
                spent = down_s + wait > policy.outage_s
                failure = (
                    f"{what}: the judge could not answer for {down_s:.0f}s ({attempt} attempts, outage_s "
                    f"{policy.outage_s:g}); last failure: {describe(exc)}"
                    if spent
                    else None
                )
            if failure is not None:
                error = JudgeFailedError(failure)
                error.attempts = attempt
                raise error from exc
            log.warning("%s: attempt %d failed (%s); retrying in %.2fs", what, attempt, describe(exc), wait)
            await asyncio.sleep(wait)
