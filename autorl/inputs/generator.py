"""The generator model's client (`Generator`): chat requests to a model spec (`ruler.endpoint`: embedded,
name@URL or a LiteLLM model), each answer continuing a prefilled start where the server allows it, a failed
request retried when it may pass, and every request recorded (`ruler.calls.CallRecord`). Apart from
`generation` (what is asked and what is kept) as the part that talks to the model."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from ruler.calls import OK, CallRecord, failure_cause
from ruler.endpoint import ModelEndpoint, import_litellm
from ruler.retry import RetryPolicy, describe, is_retryable

from ..errors import AutoRLError

logger = logging.getLogger(__name__)

RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=1.0)
"""Attempts per generator request that fails transiently, and the waits between them."""


class InputGenerationError(AutoRLError):
    """The generator failed, or gave too few usable inputs within the request budget."""


@dataclass(frozen=True)
class Answer:
    """One sampled answer of the generator."""

    text: str
    """The answer, the prefill's continuation where one was sent (the prefill itself left out)."""
    finished: bool
    """Whether the model ended it (a stop sequence or its end of turn), not the token cap."""


class Generator:
    """Chat requests to the generator model (a model spec), each recorded in `calls`."""

    def __init__(self, spec: str, prefill: bool | None = None):
        endpoint = ModelEndpoint.parse(spec)
        self._endpoint = endpoint
        self.prefill = (endpoint.is_embedded or endpoint.base_url is not None) if prefill is None else prefill
        self._target = None
        self.calls: list[CallRecord] = []
        """Every request made, in order: seconds, tokens and how it ended."""

    @property
    def is_embedded(self) -> bool:
        """Whether this is autorl's embedded model (whose context is short: `ruler.endpoint.registered_embedded`)."""
        return self._endpoint.is_embedded

    @property
    def name(self) -> str:
        """The model's name, for records and progress (never an address or a key)."""
        return self.target().name

    def target(self) -> Any:
        """Where requests go (`ruler.endpoint.LiteLLMTarget`); resolving the embedded model starts its server."""
        if self._target is None:
            self._target = self._endpoint.target()
        return self._target

    def complete(
        self, messages: list[dict[str, str]], prefill: str | None, *, n: int, seed: int, **sampling: Any
    ) -> list[Answer]:
        """`n` answers to `messages`; with `prefill` (where `self.prefill` allows) each continues it. A request that
        fails transiently (`ruler.retry.is_retryable`: a timeout, a refused connection, a 429 or 5xx) is sent
        again up to `RETRY.max_attempts` times, each attempt recorded; then InputGenerationError, in one line."""
        target = self.target()
        extra: dict[str, Any] = {}
        if prefill is not None and self.prefill:
            messages = [*messages, {"role": "assistant", "content": prefill}]
            extra["extra_body"] = {"continue_final_message": True, "add_generation_prompt": False}
        litellm = import_litellm()
        for attempt in range(1, RETRY.max_attempts + 1):
            started, outcome, usage = time.monotonic(), OK, None
            try:
                response = litellm.completion(
                    **target.params(), messages=messages, n=n, seed=seed, num_retries=0, drop_params=True,
                    **sampling, **extra,
                )  # fmt: skip
                usage = getattr(response, "usage", None)
            except Exception as exc:
                outcome = failure_cause(exc)
                if not is_retryable(exc) or attempt == RETRY.max_attempts:
                    raise InputGenerationError(f"generator call failed: {describe(exc)}") from None
                logger.warning("generator call failed (%s); retrying", describe(exc))
            finally:  # the attempt's own seconds: recorded before the back-off
                self.calls.append(
                    CallRecord(
                        target.name,
                        time.monotonic() - started,
                        getattr(usage, "prompt_tokens", 0) or 0,
                        getattr(usage, "completion_tokens", 0) or 0,
                        outcome,
                        started,
                    )
                )
            if outcome == OK:
                break
            time.sleep(RETRY.backoff_s(attempt))
        return [
            Answer(choice.message.content or "", choice.finish_reason in ("stop", "eos", None))
            for choice in response.choices
        ]
