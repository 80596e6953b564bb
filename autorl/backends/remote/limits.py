"""What one `autorl serve` lets its clients ask for (`ServeLimits`, its `--max-*` options), and how it holds them.

Every setting a client sends that costs the server memory, processes or time is bounded here: how many
models (each one a vLLM server and a trainer), how many requests at once, and each knob of a model's
vLLM server (`RegisterRequest.server`), trainer (`RegisterRequest.trainer`) and training step
(`TrainRequest.config`) that scales with what it is given. A value past its bound is a 400 naming the bound
and the option that raises it; a value is quoted by a short prefix only (`autorl.errors.quoted`). A model's
`base_model` is the embedded model, or a directory under the server's model roots (`--model-roots`; 403 else).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...errors import quoted
from ...serving.embedded import cache_dir


class ServeLimits(BaseModel):
    """What clients may ask of one `autorl serve`; each is an option of the command (`--max-models`, ...)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    max_concurrent_requests: int = Field(32, ge=1, le=100_000)
    """Requests the server handles at once (an inference stream or a training step counts until it ends);
    one more is answered 503 at once, not queued."""
    max_models: int = Field(8, ge=1, le=10_000)
    """Models the server holds (each starts a vLLM server and a trainer when used), those of its registry
    included; registering one more is refused (429)."""
    max_models_per_client: int = Field(4, ge=1, le=10_000)
    """Models one client (its `X-AutoRL-Client` id) may register while the server runs; a client id is the
    client's own choice, so `max_models` is the bound that holds against a client that changes it."""
    max_client_model_len: int = Field(8192, ge=16)
    """Largest context a client may give its model's vLLM server (`server.max_model_len`), and bound of
    `config.max_completion_tokens`, `config.overlong_buffer` and the trainer's token counts
    (`trainer.logprob_chunk_tokens`, `trainer.eager_attention_max_tokens`), and of the answer tokens an inference
    request asks for (`max_tokens`, `max_completion_tokens`)."""
    max_kv_cache_gb: float = Field(32.0, gt=0)
    """Largest KV cache a client may give its model's vLLM server (`server.kv_cache_bytes`), in GiB."""
    max_gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """Largest fraction of GPU memory a client may give its model's vLLM server (`server.gpu_memory_utilization`):
    the rest stays for the trainer and the other models."""
    max_num_seqs: int = Field(256, ge=1)
    """Most sequences a model's vLLM server may run at once (`server.max_num_seqs`), and most choices an
    inference request asks for (`n`)."""
    max_client_lora_rank: int = Field(64, ge=1)
    """Largest LoRA rank a client may train or serve (`trainer.lora_rank`, `server.max_lora_rank`)."""
    max_loras: int = Field(8, ge=1)
    """Most LoRA adapters a model's vLLM server may hold at once (`server.max_loras`)."""
    max_startup_timeout_s: float = Field(1800.0, gt=0)
    """Longest a client may let its model's vLLM server take to start (`server.startup_timeout_s`)."""
    max_restarts: int = Field(10, ge=0)
    """Most restarts of a dead vLLM server a client may ask for (`server.max_restarts`)."""
    max_client_lora_alpha: int = Field(1024, ge=1)
    """Largest LoRA alpha a client may train with (`trainer.lora_alpha`: the LoRA's scale is alpha / rank)."""
    max_ppo_epochs: int = Field(8, ge=1)
    """Most passes over a step's groups a client may ask for (`config.ppo_epochs`)."""
    max_micro_batch_size: int = Field(64, ge=1)
    """Largest micro-batch a client may ask the trainer for (`config.micro_batch_size`)."""
    max_groups_per_step: int = Field(1024, ge=1)
    """Most trajectory groups in one training step or log batch."""
    max_trajectories_per_step: int = Field(65536, ge=1)
    """Most trajectories in one training step or log batch, its groups' and a supervised step's together."""
    max_body_objects: int = Field(1_000_000, ge=1)
    """Most JSON objects in one request body (a message, a sampled token's logprob: one each), counted as the
    body is parsed, before anything is built of it: a body costs the server no more memory than this many
    objects, however small each is."""

    model_roots: list[Path] = Field(default_factory=list, max_length=100)
    """Directories a client's base model may be in (`base_model`, symlinks followed), besides the embedded model
    and autorl's model cache (CACHE/models); any other path on this machine is refused (403)."""

    def check_base_model(self, base_model: str) -> str | None:
        """The one line that refuses `base_model` when it is neither an embedded model (`embedded:NAME`) nor a
        directory under `model_roots` or autorl's model cache; None when it may be used. The line names no
        root and says nothing of whether the path exists."""
        if base_model.startswith("embedded:"):
            return None  # resolved into autorl's model cache; an unknown name is the resolver's one line
        roots = [cache_dir() / "models", *self.model_roots]
        try:  # as the resolver reads it, every link followed: a link under a root to elsewhere is elsewhere
            path = Path(base_model).expanduser().resolve()
            if any(path.is_relative_to(root.expanduser().resolve()) for root in roots):
                return None
        except (OSError, ValueError, RuntimeError):  # a NUL byte, ~nosuchuser, a link loop
            pass
        return (
            f"base model {quoted(base_model)} is not the embedded model nor under this server's model roots; "
            "its operator may allow a directory with `autorl serve --model-roots DIR`"
        )

    def check_ask(self, body: dict[str, Any], command: str = "autorl serve") -> str | None:
        """The line that refuses what an inference request (`/v1/chat/completions`, `/v1/completions`, a capture
        gateway's chat route) asks of a model past these limits (the options of `command`), or None: answer
        tokens (`max_tokens`, `max_completion_tokens`) up to `max_client_model_len`, choices (`n`) up to
        `max_num_seqs`. Checked before anything is sent on."""
        asked = {field: (body.get(field), self.max_client_model_len, "max_client_model_len") for field in ASKED_TOKENS}
        asked["n"] = (body.get("n"), self.max_num_seqs, "max_num_seqs")
        for field, (value, bound, option) in asked.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 1:  # NaN too
                return f"{field} must be a positive number, not {quoted(str(value))}"
            if value > bound:  # an int of hundreds of digits, or inf, included
                return f"{field}={shown(value)} is over the limit of {bound} ({command} --{option.replace('_', '-')})"
        return None

    @property
    def max_kv_cache_bytes(self) -> int:
        return int(self.max_kv_cache_gb * 2**30)

    def bounds(self) -> dict[str, tuple[float, str | None]]:
        """Each bounded knob of a request (a dotted path into it) with its bound and the option that sets it
        (None: a bound of `FIXED_BOUNDS`, no option's)."""
        return {
            "server.max_model_len": (self.max_client_model_len, "max_client_model_len"),
            "server.kv_cache_bytes": (self.max_kv_cache_bytes, "max_kv_cache_gb"),
            "server.gpu_memory_utilization": (self.max_gpu_memory_utilization, "max_gpu_memory_utilization"),
            "server.max_num_seqs": (self.max_num_seqs, "max_num_seqs"),
            "server.max_lora_rank": (self.max_client_lora_rank, "max_client_lora_rank"),
            "server.max_loras": (self.max_loras, "max_loras"),
            "server.startup_timeout_s": (self.max_startup_timeout_s, "max_startup_timeout_s"),
            "server.max_restarts": (self.max_restarts, "max_restarts"),
            "trainer.lora_rank": (self.max_client_lora_rank, "max_client_lora_rank"),
            "trainer.lora_alpha": (self.max_client_lora_alpha, "max_client_lora_alpha"),
            "trainer.logprob_chunk_tokens": (self.max_client_model_len, "max_client_model_len"),
            "trainer.eager_attention_max_tokens": (self.max_client_model_len, "max_client_model_len"),
            "config.ppo_epochs": (self.max_ppo_epochs, "max_ppo_epochs"),
            "config.micro_batch_size": (self.max_micro_batch_size, "max_micro_batch_size"),
            "config.max_completion_tokens": (self.max_client_model_len, "max_client_model_len"),
            "config.overlong_buffer": (self.max_client_model_len, "max_client_model_len"),
            **{path: (bound, None) for path, (bound, _) in FIXED_BOUNDS.items()},
        }

    def check(self, request: BaseModel) -> str | None:
        """The one line that says which knob of `request` (a `RegisterRequest`, `TrainRequest` or
        `LogRequest`) is past its bound, negative, or not finite; None when all are within. A list (the
        trainer's target modules) counts its names, each a module's dotted name of at most `MAX_MODULE_CHARS`."""
        for path, (bound, option) in self.bounds().items():
            value: Any = request
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
            if value is None or isinstance(value, bool):
                continue
            if isinstance(value, list):
                if not all(isinstance(name, str) and MODULE_NAME.fullmatch(name) for name in value):
                    return f"{path}: each name is a module's dotted name of at most {MAX_MODULE_CHARS} characters"
                value = len(value)
            if not isinstance(value, int | float | str) or not number(value) <= bound:
                limit = FIXED_BOUNDS[path][1] if option is None else f"this server's limit of {bound:g}"
                flag = "" if option is None else f" (autorl serve --{option.replace('_', '-')})"
                return f"{path}={shown(value)} is over {limit}{flag}"
            if number(value) < 0:
                return f"{path}={shown(value)} is negative"
        return None

    def check_body(self, raw: bytes) -> str | None:
        """The one line that says which bound a JSON body passes: its objects (`max_body_objects`), groups
        (`max_groups_per_step`) or trajectories (`max_trajectories_per_step`); None when within, or when it is
        not JSON (the request model's own parse says why). Counted as it is parsed, so a body is refused at
        the first object past a bound; what this parse keeps of an object is None, or its lists of groups and
        trajectories, so it costs little more than the body itself."""
        counts = dict.fromkeys(BODY_BOUNDS, 0)

        def seen(pairs: list[tuple[str, Any]]) -> dict[str, list] | None:
            kept = {key: value for key, value in pairs if key in ("groups", "trajectories") and isinstance(value, list)}
            counts["objects"] += 1
            counts["trajectories"] += len(kept.get("trajectories", ()))
            if "trajectories" in kept and "groups" not in kept:  # a group (a request holds both lists)
                counts["groups"] += 1
            counts["groups"] = max(counts["groups"], len(kept.get("groups", ())))
            for what, option in BODY_BOUNDS.items():
                if counts[what] > (bound := getattr(self, option)):
                    flag = "--" + option.replace("_", "-")
                    raise PastBound(
                        f"more than {bound} {what} in one request, this server's limit (autorl serve {flag})"
                    )
            return kept or None

        try:
            json.loads(raw or b"{}", object_pairs_hook=seen)
        except PastBound as exc:
            return str(exc)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: the model's parse says so
            return None
        return None


ASKED_TOKENS = ("max_tokens", "max_completion_tokens")
"""The fields of an inference request that ask for answer tokens."""
MAX_MODULE_CHARS = 128
MODULE_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.]{{0,{MAX_MODULE_CHARS - 1}}}")
FIXED_BOUNDS = {
    "trainer.seed": (2**32 - 1, "4294967295 (a seed is 32 bits)"),
    "trainer.target_modules": (64, "64 names (the modules a LoRA targets)"),
}
"""Knobs bounded by what they are, not by an option of the server: each bound and the line's end that says it."""

BODY_BOUNDS = {
    "objects": "max_body_objects",
    "groups": "max_groups_per_step",
    "trajectories": "max_trajectories_per_step",
}
"""What `ServeLimits.check_body` counts in a body, and the limit that bounds each."""


class PastBound(Exception):
    """Raised while a body is parsed: it passed a bound (the message says which)."""


def shown(value: int | float | str) -> str:
    """A knob's value in an error line: a number as it is, a string by a short prefix (a list: its length)."""
    return (
        repr(value) if isinstance(value, float) or (isinstance(value, int) and abs(value) < 10**18) else quoted(value)
    )


def number(value: int | float | str) -> float:
    """A knob's value as a number: a string as pydantic would read it, one that reads as none as NaN."""
    try:
        return float(value)
    except ValueError:
        return math.nan
    except OverflowError:  # an int of hundreds of digits
        return math.inf


class Concurrency:
    """ASGI middleware: at most `limit` requests at once (a streamed answer counts until it ends); one more is
    answered 503 with Retry-After at once. /health is always answered."""

    def __init__(self, app: Any, limit: int):
        self.app = app
        self.limit = limit
        self.running = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") == "/health":
            return await self.app(scope, receive, send)
        if self.running >= self.limit:
            body = json.dumps(
                {
                    "error": f"the server is handling {self.limit} requests; retry later (autorl serve --max-concurrent-requests)"
                }
            ).encode()
            headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return None
        self.running += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.running -= 1
