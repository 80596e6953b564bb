"""What model calls cost: every call's tokens, counted by kind and model in this process (`Meter`), and priced
(`priced`, summed by `added`).

Two prices: an API model's tokens at LiteLLM's price table (`litellm.cost_per_token`; a model it does not know
is listed as unpriced, its tokens still counted), and this machine's time at `--price-per-hour` (the policy's
server, the trainer and the embedded model run here, so a stage's wall-clock seconds are what it held the
machine for; 0 by default: seconds and tokens only).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ruler.calls import CallRecord
from ruler.endpoint import EMBEDDED, ModelEndpoint, import_litellm

KINDS = ("policy", "judge", "generator")
"""Who makes model calls: the policy's rollouts, the judge's requests, the generator's (inputs, system prompt)."""


def runs_here(model: str) -> bool:
    """Whether a model's calls are this machine's time, not an API's tokens: the embedded judge (`embedded`),
    an embedded model named by the generator (`embedded:smollm2-135m`)."""
    return model == EMBEDDED or model.startswith(f"{EMBEDDED}:")


def counted_as(endpoint: ModelEndpoint) -> str:
    """The name a model's tokens are counted under: a LiteLLM model's (priced at its table), `embedded`, or
    `name@server` for a model on the user's own server (never priced as the API model of the same name; its
    address is not written)."""
    return f"{endpoint.model}@server" if endpoint.base_url else endpoint.model


@cache
def token_price(model: str) -> tuple[float, float] | None:
    """USD per input and per output token of an API model in LiteLLM's price table; None for an embedded
    model, a `name@URL` server of the user's and a model the table lacks."""
    if runs_here(model) or "@" in model:
        return None
    try:
        prompt, completion = import_litellm().cost_per_token(model=model, prompt_tokens=1, completion_tokens=1)
    except Exception:  # LiteLLM raises its own errors for a model it cannot place
        return None
    return float(prompt), float(completion)


@dataclass
class Meter:
    """Tokens used so far in this process, by kind and model (the judge's and generator's from their call
    records, the policy's from its rollouts), read at two points to get what happened in between."""

    tokens: Counter = field(default_factory=Counter)
    """(kind, model, "prompt" | "completion") -> tokens, for what `add` was given (the policy's rollouts)."""

    def add(self, kind: str, model: str, prompt: int, completion: int) -> None:
        self.tokens[kind, model, "prompt"] += int(prompt)
        self.tokens[kind, model, "completion"] += int(completion)

    def reading(self, judge: list[CallRecord], generator: list[CallRecord]) -> Reading:
        """Now: the time, a copy of the counted tokens and how many judge and generator records exist."""
        return Reading(time.monotonic(), Counter(self.tokens), len(judge), len(generator))

    def since(
        self, start: Reading, judge: list[CallRecord], generator: list[CallRecord], price_per_hour: float
    ) -> dict[str, Any]:
        """What was spent since `start` (`priced`)."""
        tokens = self.tokens - start.tokens
        for kind, records in (("judge", judge[start.judge :]), ("generator", generator[start.generator :])):
            for record in records:
                tokens[kind, record.model, "prompt"] += record.prompt_tokens
                tokens[kind, record.model, "completion"] += record.completion_tokens
        return priced(time.monotonic() - start.time, tokens, price_per_hour)


@dataclass(frozen=True)
class Reading:
    time: float
    tokens: Counter
    judge: int
    generator: int


def priced(seconds: float, tokens: Counter, price_per_hour: float) -> dict[str, Any]:
    """A cost record: `seconds`, `tokens` per kind (prompt, completion), `tokens_total`, `usd` (`compute`: the
    seconds at `price_per_hour`; `api`: API models' tokens at LiteLLM's prices; `total`) and `unpriced` (models
    other than the policy and the embedded ones whose price is unknown, their tokens in `tokens` only)."""
    by_kind: dict[str, dict[str, int]] = {}
    api, unpriced = 0.0, set()
    for (kind, model, side), count in sorted(tokens.items()):
        by_kind.setdefault(kind, {"prompt": 0, "completion": 0})[side] += count
        if kind == "policy" or not count:
            continue
        if (price := token_price(model)) is None:
            if not runs_here(model):
                unpriced.add(model)
            continue
        api += count * price[0 if side == "prompt" else 1]
    compute = seconds * price_per_hour / 3600
    return {
        "seconds": round(seconds, 2),
        "tokens": by_kind,
        "tokens_total": sum(sum(sides.values()) for sides in by_kind.values()),
        "usd": {"compute": round(compute, 6), "api": round(api, 6), "total": round(compute + api, 6)},
        **({"unpriced": sorted(unpriced)} if unpriced else {}),
    }


def added(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of cost records."""
    total: dict[str, Any] = {"seconds": 0.0, "tokens": {}, "tokens_total": 0, "usd": dict.fromkeys(USD, 0.0)}
    unpriced: set[str] = set()
    for cost in costs:
        total["seconds"] = round(total["seconds"] + cost["seconds"], 2)
        total["tokens_total"] += cost["tokens_total"]
        for kind, sides in cost["tokens"].items():
            mine = total["tokens"].setdefault(kind, {"prompt": 0, "completion": 0})
            for side, count in sides.items():
                mine[side] += count
        for key in USD:
            total["usd"][key] = round(total["usd"][key] + cost["usd"][key], 6)
        unpriced.update(cost.get("unpriced", []))
    if unpriced:
        total["unpriced"] = sorted(unpriced)
    return total


USD = ("compute", "api", "total")
