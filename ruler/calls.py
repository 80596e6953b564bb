"""What each request to a model cost and how it ended (`CallRecord`), kept by the judge that made it
(`RulerJudge.calls`) and summarised per model (`summarize`): latency, tokens, and the cause of every retry
(a timeout, an answer that is not JSON, the wrong number of scores, a server error, ...), so a slow or
flaky judge is explained by its record, not guessed at."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import openai

OK = "ok"


@dataclass(frozen=True)
class CallRecord:
    """One request to a model."""

    model: str
    """The model's name (never an address or a key)."""
    seconds: float
    """From sending the request to the answer (or the failure)."""
    prompt_tokens: int = 0
    """Input tokens the server reported (0 when the call failed before it answered)."""
    completion_tokens: int = 0
    """Output tokens the server reported."""
    outcome: str = OK
    """"ok", or why the call failed (`failure_cause`)."""
    started: float | None = None
    """When the request was sent, in `time.monotonic()` seconds of the process that sent it (where a run's
    time went: `autorl.activity`); not written to records, where it means nothing."""

    def as_json(self) -> dict[str, Any]:
        record = {**dataclasses.asdict(self), "seconds": round(self.seconds, 3)}
        record.pop("started")
        return record

    def span_attributes(self) -> dict[str, Any]:
        """The request's span attributes (GenAI semantic conventions where they fit)."""
        return {
            "gen_ai.usage.input_tokens": self.prompt_tokens,
            "gen_ai.usage.output_tokens": self.completion_tokens,
            "ruler.seconds": round(self.seconds, 3),
            "ruler.outcome": self.outcome,
        }


def failure_cause(exc: BaseException) -> str:
    """A short name for why a model call failed: the cause an invalid answer states (`InvalidAnswer.cause`:
    malformed_json, no_scores, wrong_count, bad_score, cut), else timeout, connection, rate_limited, server_error
    (HTTP 5xx), http_<status>, context_overflow, or the exception's type."""
    from .client import is_context_overflow

    if cause := getattr(exc, "cause", None):
        return str(cause)
    if isinstance(exc, asyncio.TimeoutError | TimeoutError | openai.APITimeoutError):
        return "timeout"
    if is_context_overflow(exc):
        return "context_overflow"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return "rate_limited" if status == 429 else "server_error" if status >= 500 else f"http_{status}"
    name = type(exc).__name__
    return "timeout" if "Timeout" in name else "connection" if "Connection" in name else name


def summarize(records: Iterable[CallRecord]) -> dict[str, dict[str, Any]]:
    """Per model: calls, failed calls by cause, seconds in all and per call (median, max), tokens."""
    by_model: dict[str, list[CallRecord]] = {}
    for record in records:
        by_model.setdefault(record.model, []).append(record)
    summary = {}
    for model, calls in by_model.items():
        seconds = [c.seconds for c in calls]
        failures = Counter(c.outcome for c in calls if c.outcome != OK)
        summary[model] = {
            "calls": len(calls),
            "failed": dict(sorted(failures.items())),
            "seconds": round(sum(seconds), 2),
            "median_s": round(statistics.median(seconds), 2),
            "max_s": round(max(seconds), 2),
            "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls),
        }
    return summary
