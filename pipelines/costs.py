"""What a run costs: every model call's tokens, priced, summed per stage, per training step and per run; and the
budget (`--budget-usd`, `--budget-tokens`) that stops a run at the end of the step that crosses it.

Two prices: an API model's tokens at LiteLLM's price table (`litellm.cost_per_token`; a model it does not know
is listed as unpriced, its tokens still counted), and this machine's time at `--price-per-hour` (the policy's
server, the trainer and the embedded model run here, so a stage's wall-clock seconds are what it held the
machine for; 0 by default: seconds and tokens only). A stage's cost is what making its artifact cost when it
ran (kept in its summary, so a cached stage still counts what it cost once); the train stage's is the sum of
its steps' (each step's `cost.json`), so a resumed training counts the steps of every invocation.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autorl.errors import AutoRLError
from ruler.calls import CallRecord
from ruler.endpoint import EMBEDDED, ModelEndpoint

from .config import STAGES
from .records.step_costs import priced_steps, step_cost_lines, step_costs
from .records.train import last_step, steps_done

if TYPE_CHECKING:
    from .context import StageContext

KINDS = ("policy", "judge", "generator")
"""Who makes model calls: the policy's rollouts, the judge's requests, the generator's (inputs, system prompt)."""


class BudgetReached(AutoRLError):
    """The run's spending crossed `--budget-usd` or `--budget-tokens`: it stops after the step (or stage) that
    crossed it, its checkpoint kept; the same command with a higher budget continues it."""


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
        from ruler.endpoint import import_litellm

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


def steps_cost(train_dir: Path, steps: int) -> list[dict[str, Any]]:
    """The cost records of training steps 1..`steps` (`spent` in each step's cost file) and of the steps that a
    sentinel rollback dropped on the way there (trained, paid for, then trained again), skipping a step that
    has none (trained before autorl priced steps): `records.step_costs.priced_steps`."""
    return [spent for _, _, spent in priced_steps(train_dir, steps)]


def run_costs(ctx: StageContext) -> dict[str, dict[str, Any]]:
    """The cost record of each stage whose artifact exists (or, for train, whose steps exist), in stage order:
    what making the run's artifacts cost, whichever invocation made them."""
    costs = {}
    for stage in STAGES:
        if stage == "train":
            if steps := steps_cost(ctx.policy.run_dir, min(steps_done(ctx), last_step(ctx))):
                costs[stage] = added(steps)
        elif (cost := ctx.store.summary(stage, ctx.keys[stage]).get("cost")) is not None:
            costs[stage] = cost
    return costs


def check_run_budget(ctx: StageContext, where: str) -> None:
    """Raise `BudgetReached` when the run's cost so far (`run_costs`) reached its budget."""
    config = ctx.config
    if config.budget_usd is not None or config.budget_tokens is not None:
        check_budget(added(list(run_costs(ctx).values())), config.budget_usd, config.budget_tokens, where)


def report_section(ctx: StageContext, costs: dict[str, dict[str, Any]]) -> list[str]:
    """The report's cost section: per stage (`costs`, the run's `run_costs`) and in all, the training steps'
    (`records.step_costs.step_cost_lines`), and the budget if one was set."""
    total = added(list(costs.values()))
    config = ctx.config
    budget = [
        f"--budget-usd {config.budget_usd:g}" if config.budget_usd is not None else "",
        f"--budget-tokens {config.budget_tokens}" if config.budget_tokens is not None else "",
    ]
    lines = [
        "",
        "## Cost",
        "",
        f"Tokens of every model call; API models at LiteLLM's prices, this machine's time at --price-per-hour "
        f"{config.price_per_hour:g} USD.",
        "",
        *cost_lines(costs, total),
    ]
    if given := " and ".join(filter(None, budget)):
        lines += ["", f"Budget: {given}; spent ${total['usd']['total']:.4f} and {total['tokens_total']} tokens."]
    return lines + step_cost_lines(step_costs(ctx))


def check_budget(spent: dict[str, Any], budget_usd: float | None, budget_tokens: int | None, where: str) -> None:
    """Raise `BudgetReached` when `spent` (the run's cost so far) reached either budget; `where` names the
    step or stage that crossed it."""
    crossed = []
    if budget_usd is not None and spent["usd"]["total"] >= budget_usd:
        crossed.append(f"${spent['usd']['total']:.4f} of --budget-usd {budget_usd:g}")
    if budget_tokens is not None and spent["tokens_total"] >= budget_tokens:
        crossed.append(f"{spent['tokens_total']} tokens of --budget-tokens {budget_tokens}")
    if crossed:
        raise BudgetReached(
            f"budget reached after {where}: spent {' and '.join(crossed)}; the run stopped there, its checkpoints "
            "kept; run the same command with a higher budget to continue"
        )


def cost_lines(costs: dict[str, dict[str, Any]], total: dict[str, Any]) -> list[str]:
    """A Markdown table of cost records (per stage or per step, and the total)."""
    lines = [
        "| | seconds | policy tokens | judge tokens | generator tokens | compute USD | API USD | total USD |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, cost in [*costs.items(), ("**total**", total)]:
        counts = [sum(cost["tokens"].get(kind, {}).values()) for kind in KINDS]
        usd = cost["usd"]
        lines.append(
            f"| {name} | {cost['seconds']:.1f} | {' | '.join(str(c) for c in counts)} | "
            f"{usd['compute']:.4f} | {usd['api']:.4f} | {usd['total']:.4f} |"
        )
    if total.get("unpriced"):
        lines.append(f"\nNot in LiteLLM's price table (tokens counted, not priced): {', '.join(total['unpriced'])}.")
    return lines


def budget_report(name: str, stopped: str, ctx: StageContext) -> str:
    """The run's report when its budget stopped it: why, and the cost so far."""
    return (
        "\n".join([f"# autorl run `{name}`", "", f"**Stopped:** {stopped}.", *report_section(ctx, run_costs(ctx))])
        + "\n"
    )
