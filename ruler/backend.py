"""Judge backends: which model answers, and one chat call to it through LiteLLM.

A judge model is named by a string:
- a LiteLLM model (`openai/gpt-4.1-mini`, `anthropic/claude-sonnet-4-5`, `ollama/qwen3:8b`, ...), whose
  key LiteLLM reads from the provider's usual environment variable;
- `"embedded"`: the embedded base model on autorl's local vLLM server, started on first use;
- `name@http://host:port/v1`: model `name` on any OpenAI-compatible server (a vLLM server, for one).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import JudgeSpecError

DEFAULT_JUDGE_MODEL = "openai/gpt-4.1-mini"
EMBEDDED = "embedded"
NO_KEY = "EMPTY"
"""The key sent to an OpenAI-compatible endpoint when none is configured (local servers ignore it)."""
CREDENTIAL_WORDS = {"key", "secret", "password", "credential", "credentials", "authorization", "headers", "token"}


class JudgeModel(BaseModel):
    """The model RULER asks, and how it is called."""

    model_config = ConfigDict(frozen=True)

    model: str = Field(DEFAULT_JUDGE_MODEL, min_length=1)
    """A LiteLLM model string, `"embedded"`, or the served model name when `base_url` is set."""
    base_url: str | None = None
    """An OpenAI-compatible endpoint (`http://host:port/v1`) serving `model`; None: LiteLLM's provider routing."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key. None: the provider's usual variable for LiteLLM
    models, and no key for a `base_url` endpoint. The key itself is never stored, hashed or logged."""
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

    @classmethod
    def parse(cls, spec: str) -> JudgeModel:
        """A judge model from its string form: a LiteLLM model, `"embedded"`, or `name@http(s)://host/v1`."""
        name, base_url = spec, None
        for scheme in ("@http://", "@https://"):
            if scheme in spec:
                name, _, rest = spec.partition(scheme)
                base_url = scheme[1:] + rest
        try:
            return cls(model=name, base_url=base_url)
        except ValidationError as exc:
            raise JudgeSpecError(f"judge {spec!r}: {exc.errors()[0]['msg']}") from None

    def identity(self) -> dict[str, Any]:
        """What identifies this judge's answers in the cache: the model and its sampling settings.

        The endpoint address is left out (a local server's port changes between runs), and so is
        everything about credentials.
        """
        return self.model_dump(include={"model", "temperature", "max_tokens", "extra_params"})

    def context_limit(self) -> int | None:
        """`context_tokens`, else for the embedded judge its server's default `max_model_len`, else None."""
        if self.context_tokens is not None:
            return self.context_tokens
        if self.model == EMBEDDED:
            try:
                from autorl.vllm_server import ServerConfig
            except ImportError:
                return None
            return ServerConfig().max_model_len
        return None

    def check_provider(self) -> None:
        """Raise `JudgeSpecError` unless LiteLLM knows the provider of a provider-routed model."""
        if self.model == EMBEDDED or self.base_url:
            return
        litellm = import_litellm()
        try:
            litellm.get_llm_provider(self.model)
        except litellm.BadRequestError:
            raise JudgeSpecError(
                f"judge {self.model!r} names no known LiteLLM provider; use 'provider/model' (e.g. "
                f"{DEFAULT_JUDGE_MODEL}), 'embedded', 'name@http://host:port/v1', or 'module:attribute'"
            ) from None


def import_litellm():
    """LiteLLM, imported on first use (it takes seconds), quiet, and without fetching its price list online."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


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


@dataclass(frozen=True)
class _Target:
    """Where one call goes, as LiteLLM wants it."""

    model: str
    api_base: str | None
    api_key: str | None


class JudgeClient:
    """Sends chat requests for one `JudgeModel`; the embedded server is started on the first request."""

    def __init__(self, model: JudgeModel):
        self.model = model
        self._target: _Target | None = None

    async def _resolve(self) -> _Target:
        m = self.model
        if m.model == EMBEDDED:
            try:
                from autorl.vllm_server import embedded_endpoint
            except ImportError as exc:
                raise JudgeSpecError(
                    f"the embedded judge needs autorl.vllm_server, which fails to import: {exc}"
                ) from exc
            endpoint = await asyncio.to_thread(embedded_endpoint)
            return _Target(f"openai/{endpoint.model}", endpoint.base_url, NO_KEY)
        if m.base_url:
            return _Target(f"openai/{m.model}", m.base_url, self._api_key() or NO_KEY)
        return _Target(m.model, None, self._api_key())

    def _api_key(self) -> str | None:
        name = self.model.api_key_env
        if name is None:
            return None
        if not os.environ.get(name):
            raise JudgeSpecError(f"environment variable {name} (the judge's api_key_env) is not set")
        return os.environ[name]

    async def complete(
        self,
        messages: list[dict[str, Any]],
        response_format: dict[str, Any],
        usage: Usage,
        max_tokens: int | None = None,
    ) -> str:
        """One chat completion; adds its token usage to `usage` and returns the answer text.

        max_tokens: the answer cap for this request; None: the model's `max_tokens`. A cap in
        `extra_params` (`max_tokens` or `max_completion_tokens`) wins over both.
        """
        if self._target is None:
            self._target = await self._resolve()
        m, target = self.model, self._target
        cap = None if {"max_tokens", "max_completion_tokens"} & set(m.extra_params) else (max_tokens or m.max_tokens)
        sampling = {"temperature": m.temperature, "max_tokens": cap}
        response = await import_litellm().acompletion(
            model=target.model,
            messages=messages,
            response_format=response_format,
            api_base=target.api_base,
            api_key=target.api_key,
            timeout=m.timeout_s,
            num_retries=0,  # RULER retries itself, with backoff and answer validation
            max_retries=0,
            **{k: v for k, v in sampling.items() if v is not None},
            **m.extra_params,
        )
        usage.add(response)
        return response.choices[0].message.content or ""
