"""A chat model named by one string, and where a LiteLLM call to it goes.

A model spec is one of
- a LiteLLM model (`openai/gpt-4.1-mini`, `anthropic/claude-sonnet-4-5`, `ollama/qwen3:8b`, ...), whose
  key LiteLLM reads from the provider's usual environment variable;
- `"embedded"`: an embedded model served by the library that registers it (`register_embedded`; autorl
  registers its embedded base model on a local vLLM server, started on first use, when it is imported);
- `name@http://host:port/v1`: model `name` on any OpenAI-compatible server (a vLLM server, for one).

RULER's judge (`JudgeModel` extends `ModelEndpoint`), autorl's input generator and the API-model variants
of `autorl benchmark` all name their model this way: `ModelEndpoint.parse` reads a spec,
`ModelEndpoint.target` says where a call goes, and `import_litellm` is how LiteLLM is imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import ClassVar, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from .errors import ModelSpecError

EMBEDDED = "embedded"
"""The spec of the embedded model (`register_embedded` says where it is served)."""
NO_KEY = "EMPTY"
"""The key sent to an OpenAI-compatible endpoint when none is configured (local servers ignore it)."""
FORMS = "'provider/model' (e.g. openai/gpt-4.1-mini), 'embedded' or 'name@http://host:port/v1'"
"""The spec forms, as error messages name them."""


def use_local_cost_map() -> None:
    """Make LiteLLM read the price map it ships with instead of downloading one when it is imported (by
    `import_litellm`, or by DSPy), so nothing reaches the network unasked. LITELLM_LOCAL_MODEL_COST_MAP=False
    in the environment opts back in."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def import_litellm() -> ModuleType:
    """LiteLLM, imported on first use (it takes seconds), quiet, and with its local price map."""
    use_local_cost_map()
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class EmbeddedModel(Protocol):
    """Where the `"embedded"` spec is served, as the library that serves it registers it (`register_embedded`)."""

    def endpoint(self) -> ModelEndpoint:
        """The served model and its OpenAI-compatible URL; may start a server (blocking: call it in a thread)."""
        ...

    def context_tokens(self) -> int | None:
        """The served model's context window in tokens (prompt + answer), if known."""
        ...


_embedded: EmbeddedModel | None = None


def register_embedded(model: EmbeddedModel | None) -> None:
    """Make the `"embedded"` spec mean `model` (None: nothing). ruler serves no model itself; autorl registers
    its embedded model when it is imported."""
    global _embedded
    _embedded = model


def registered_embedded() -> EmbeddedModel | None:
    """What `"embedded"` means now (None: nothing is registered)."""
    return _embedded


@dataclass(frozen=True)
class LiteLLMTarget:
    """Where one call to a model goes, as LiteLLM (and `dspy.LM`) take it."""

    model: str
    """The LiteLLM model string: the spec's model, or `openai/<name>` for an OpenAI-compatible server."""
    name: str
    """The model's own name, for records and progress bars (never an address or a key)."""
    api_base: str | None = None
    """The OpenAI-compatible endpoint; None: LiteLLM's provider routing."""
    api_key: str | None = field(default=None, repr=False)
    """The key to send; None: LiteLLM reads the provider's usual variable."""

    def params(self) -> dict[str, str]:
        """`model`, and `api_base` and `api_key` where set: keyword arguments of a LiteLLM call or a `dspy.LM`."""
        values = {"model": self.model, "api_base": self.api_base, "api_key": self.api_key}
        return {name: value for name, value in values.items() if value is not None}


class ModelEndpoint(BaseModel):
    """A chat model: a LiteLLM model, the embedded model, or a model on an OpenAI-compatible server."""

    model_config = ConfigDict(frozen=True)

    kind: ClassVar[str] = "model"
    """What the model is for, as error messages name it."""
    forms: ClassVar[str] = FORMS
    """The spec forms that error messages suggest."""
    spec_error: ClassVar[type[ModelSpecError]] = ModelSpecError
    """The error raised for a spec that names no usable model."""

    model: str = Field(min_length=1)
    """A LiteLLM model string, `"embedded"`, or the served model name when `base_url` is set."""
    base_url: str | None = None
    """An OpenAI-compatible endpoint (`http://host:port/v1`) serving `model`; None: LiteLLM's provider routing."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key. None: the provider's usual variable for LiteLLM
    models, and no key for a `base_url` endpoint. The key itself is never stored, hashed or logged."""
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)
    """The key of a `base_url` endpoint given in code rather than by `api_key_env` (autorl's embedded server
    hands its clients its own key this way); never dumped, hashed or logged, and not part of `parse`."""

    @classmethod
    def parse(cls, spec: str) -> Self:
        """The model a spec names: a LiteLLM model, `"embedded"`, or `name@http(s)://host/v1`."""
        name, base_url = spec, None
        for scheme in ("@http://", "@https://"):
            if scheme in spec:
                name, _, rest = spec.partition(scheme)
                base_url = scheme[1:] + rest
        if not name.strip():
            raise cls.spec_error(f"{cls.kind} {spec!r} names no model; use {cls.forms}")
        try:
            return cls(model=name, base_url=base_url)
        except ValidationError as exc:
            raise cls.spec_error(f"{cls.kind} {spec!r}: {exc.errors()[0]['msg']}") from None

    @property
    def is_embedded(self) -> bool:
        """Whether this is the embedded model on autorl's local server (not a server's model named "embedded")."""
        return self.model == EMBEDDED and self.base_url is None

    def check_provider(self) -> None:
        """Raise `spec_error` unless LiteLLM knows the provider of a provider-routed model."""
        if self.is_embedded or self.base_url:
            return
        litellm = import_litellm()
        try:
            litellm.get_llm_provider(self.model)
        except litellm.BadRequestError:
            raise self.spec_error(
                f"{self.kind} {self.model!r} names no known LiteLLM provider; use {self.forms}"
            ) from None

    def target(self) -> LiteLLMTarget:
        """Where calls to this model go. For the embedded model this asks what registered it
        (`register_embedded`), which may start a server on first use (blocking: call it in a thread from
        async code)."""
        if self.is_embedded:
            if _embedded is None:
                raise self.spec_error(
                    f"{self.kind} 'embedded' names no model: nothing registered one (`import autorl` registers "
                    "autorl's embedded model)"
                )
            return _embedded.endpoint().target()
        if self.base_url:
            return LiteLLMTarget(f"openai/{self.model}", self.model, self.base_url, self._api_key() or NO_KEY)
        return LiteLLMTarget(self.model, self.model, None, self._api_key())

    def _api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        name = self.api_key_env
        if name is None:
            return None
        if not os.environ.get(name):
            raise self.spec_error(
                f"environment variable {name} (the api_key_env of {self.kind} {self.model}) is not set"
            )
        return os.environ[name]
