"""What a run costs: every model call's tokens, priced (`pipelines.records.pricing`), summed per stage, per
training step and per run; and the budget (`--budget-usd`, `--budget-tokens`) that stops a run at the end of the
step that crosses it.

A stage's cost is what making its artifact cost when it
ran (kept in its summary, so a cached stage still counts what it cost once); the train stage's is the sum of
its steps' (each step's `cost.json`), so a resumed training counts the steps of every invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autorl.errors import AutoRLError

from .config import STAGES
from .records.pricing import KINDS, added
from .records.step_costs import step_cost_lines, step_costs, steps_cost
from .records.train import last_step, steps_done

if TYPE_CHECKING:
    from .stage_context import StageContext


class BudgetReached(AutoRLError):
    """The run's spending crossed `--budget-usd` or `--budget-tokens`: it stops after the step (or stage) that
    crossed it, its checkpoint kept; the same command with a higher budget continues it."""


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
