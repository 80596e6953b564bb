"""The judge's LLM client: the judge model (`JudgeModel`: a model spec, `ruler.endpoint`, plus how RULER calls it)
and one chat call to it through LiteLLM."""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from .endpoint import FORMS, LiteLLMTarget, ModelEndpoint, import_litellm, registered_embedded
from .errors import JudgeSpecError

DEFAULT_JUDGE_MODEL = "openai/gpt-4.1-mini"
CREDENTIAL_WORDS = {"key", "secret", "password", "credential", "credentials", "authorization", "headers", "token"}


class JudgeModel(ModelEndpoint):
    """The model RULER asks, and how it is called."""

    kind: ClassVar[str] = "judge"
    forms: ClassVar[str] = f"{FORMS}, or 'module:attribute' (a judge of your own)"
    spec_error: ClassVar[type[JudgeSpecError]] = JudgeSpecError

    model: str = Field(DEFAULT_JUDGE_MODEL, min_length=1)
    """A LiteLLM model string, `"embedded"`, or the served model name when `base_url` is set."""
    temperature: float | None = None
    """Sampling temperature; None: the provider's default."""
    max_tokens: int | None = Field(None, ge=1)
    """Cap on the judge's answer length. None: sized to the group (`ruler.scores.answer_tokens`) when the
    context is known (`context_limit()`), else the provider's default (a thinking model's reasoning counts
    against max_tokens, so RULER does not guess a cap for a judge it knows nothing about)."""
    context_tokens: int | None = Field(None, ge=1)
    """The judge's context window (prompt + answer), in tokens. When known, each request is fitted into
    it: max_tokens is reserved for the answer and the longest messages are shortened until the prompt fits
    the rest. None: the embedded judge's server `max_model_len`; unknown (no fitting) for other models."""
    timeout_s: float = Field(120.0, gt=0)
    """Seconds one judge request may take before it counts as failed (and is retried)."""
    extra_params: dict[str, Any] = Field(default_factory=dict)
    """More `litellm.acompletion` parameters (e.g. `reasoning_effort`); credentials are refused here."""

    @field_validator("extra_params")
    @classmethod
    def _no_credentials(cls, params: dict[str, Any]) -> dict[str, Any]:
        secret = [name for name in params if CREDENTIAL_WORDS & set(name.lower().split("_"))]
        if secret:
            raise ValueError(f"extra_params may not carry credentials ({', '.join(secret)}); use api_key_env")
        return params

    def identity(self) -> dict[str, Any]:
        """What identifies this judge's answers in the cache: the model, its sampling settings, and for a
        `name@URL` judge the endpoint it is asked on (`endpoint`: host, port and path), since the same name on two
        servers can be two models. Never a key or a URL's credentials. The embedded judge is "embedded"
        wherever its server runs (its port changes between runs, its weights do not), so reruns hit the cache.
        """
        identity = self.model_dump(include={"model", "temperature", "max_tokens", "extra_params"})
        if self.base_url is not None:
            identity["endpoint"] = endpoint_identity(self.base_url)
        return identity

    def context_limit(self) -> int | None:
        """`context_tokens`, else for the embedded judge what its registration says (autorl's: its server's
        default `max_model_len`), else None."""
        if self.context_tokens is not None:
            return self.context_tokens
        if self.is_embedded and (embedded := registered_embedded()) is not None:
            return embedded.context_tokens()
        return None


def endpoint_identity(base_url: str) -> str:
    """The endpoint of an OpenAI-compatible `base_url`: `host:port/path` (the scheme's default port when none is
    given; the path, since one gateway serves teams or models under paths of their own), without credentials,
    query or a trailing slash."""
    url = urlsplit(base_url)
    port = url.port or {"https": 443}.get(url.scheme, 80)
    host = f"[{url.hostname}]" if url.hostname and ":" in url.hostname else url.hostname
    return f"{host}:{port}{url.path.rstrip('/')}"


_STATED_CONTEXT = re.compile(r"maximum (?:context length|model length) (?:is|of) (\d+)", re.IGNORECASE)


def is_context_overflow(exc: BaseException | None) -> bool:
    """Whether a failed judge call says the prompt did not fit the model's context (LiteLLM's
    `ContextWindowExceededError`, or a provider message naming the maximum context length)."""
    if exc is None:
        return False
    litellm = sys.modules.get("litellm")
    if litellm is not None and isinstance(exc, litellm.ContextWindowExceededError):
        return True
    return _STATED_CONTEXT.search(str(exc)) is not None


def stated_context_tokens(exc: BaseException) -> int | None:
    """The context length a context-overflow error states (vLLM and OpenAI state it), else None."""
    match = _STATED_CONTEXT.search(str(exc))
    return int(match[1]) if match else None


@dataclass
class Usage:
    """Tokens and cost of judge calls, summed over attempts."""

    prompt_tokens: int = 0
    """Input tokens the provider reported."""
    completion_tokens: int = 0
    """Output tokens the provider reported."""
    cost_usd: float | None = None
    """None when the provider's price is unknown (e.g. a local server)."""

    def add(self, response: Any) -> None:
        """Count one completion response (a LiteLLM `ModelResponse`)."""
        usage = getattr(response, "usage", None)
        self.prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
        self.completion_tokens += getattr(usage, "completion_tokens", 0) or 0
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + float(cost)


class JudgeClient:
    """Sends chat requests for one `JudgeModel`; the embedded server is started on the first request."""

    def __init__(self, model: JudgeModel):
        self.model = model
        self._target: LiteLLMTarget | None = None

    async def complete(
        self,
        messages: list[dict[str, Any]],
        response_format: dict[str, Any],
        usage: Usage,
        max_tokens: int | None = None,
    ) -> tuple[str, str | None]:
        """One chat completion; adds its token usage to `usage` and returns the answer text and why it ended
        (`finish_reason`: "length" when it ran past its token cap).

        max_tokens: the answer cap for this request; None: the model's `max_tokens`. A cap in
        `extra_params` (`max_tokens` or `max_completion_tokens`) wins over both.
        """
        if self._target is None:
            self._target = await asyncio.to_thread(self.model.target)
        m = self.model
        cap = None if {"max_tokens", "max_completion_tokens"} & set(m.extra_params) else (max_tokens or m.max_tokens)
        sampling = {"temperature": m.temperature, "max_tokens": cap}
        response = await import_litellm().acompletion(
            **self._target.params(),
            messages=messages,
            response_format=response_format,
            timeout=m.timeout_s,
            num_retries=0,  # RULER retries itself, with backoff and answer validation
            max_retries=0,
            **{k: v for k, v in sampling.items() if v is not None},
            **m.extra_params,
        )
        usage.add(response)
        choice = response.choices[0]
        return choice.message.content or "", choice.finish_reason
