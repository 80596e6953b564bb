"""Reading run records for `autorl runs` and `autorl show`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from autorl.errors import AutoRLError

from .config import STAGES, check_run_name
from .records.pricing import KINDS
from .records.run import RUN_FILE, read_record
from .records.step_costs import STEP_COST_COLUMNS, STEP_COST_NOTE, step_cost_summary


def load_runs(home: Path, damaged: list[str] | None = None) -> list[dict[str, Any]]:
    """The records of the runs in `home`; the error line of each damaged one goes to `damaged` (if given)."""
    records = []
    for path in sorted((home / "runs").glob(f"*/{RUN_FILE}")):
        try:
            records.append({"name": path.parent.name, **read_record(path)})
        except AutoRLError as exc:
            if damaged is not None:
                damaged.append(str(exc))
    return records


def validation_figures(record: dict[str, Any]) -> dict[str, str]:
    """Base, latest and best validation reward of a run, as `mean (scored/total inputs)`, all from the one
    judging of the evaluate stage (each input's answers of every variant judged together): figures from
    different judgings are never shown side by side. Empty until the run is evaluated."""
    summary = record.get("stages", {}).get("evaluate", {}).get("summary", {})
    total = summary.get("val_inputs", "?")
    return {
        variant: f"{s['mean']:.3f} ({s['inputs']}/{total})" if "mean" in s else f"- (0/{total})"
        for variant, s in summary.get("variants", {}).items()
    }


def judge_verdict(record: dict[str, Any]) -> str:
    """The preflight stage's verdict on the run's judge (`reliable`, `noisy`, `noise`, `uninformative`), `off`,
    or `-` before the stage ran: beside the validation rewards, as in the report."""
    summary = record.get("stages", {}).get("preflight", {}).get("summary")
    if not summary:
        return "-"
    return "off" if summary.get("off") else summary["audit"]["verdict"]


def runs_table(home: Path, damaged: list[str] | None = None) -> Table:
    """The runs of `home`, one row each; a damaged record's error line goes to `damaged` instead."""
    caption = (
        "validation reward (inputs scored/validation inputs), every variant judged head to head; judge: the "
        "audit's verdict before training"
    )
    table = Table(title=f"runs in {home / 'runs'}", caption=caption)
    for column in ("name", "status", "steps", "base val", "latest val", "best val", "judge", "task"):
        table.add_column(column)
    for record in load_runs(home, damaged):
        try:
            table.add_row(*run_row(record))
        except (TypeError, KeyError, AttributeError, ValueError) as exc:  # a record edited or written by hand
            if damaged is not None:
                damaged.append(f"{record['name']}: its {RUN_FILE} does not hold a run's record ({type(exc).__name__})")
    return table


def run_row(record: dict[str, Any]) -> list[str]:
    """A run's row of `runs_table`, every cell text."""
    figures = validation_figures(record)
    return [
        record["name"],
        str(record.get("status", "?")),
        str(record.get("stages", {}).get("train", {}).get("summary", {}).get("steps", "-")),
        figures.get("base", "-"),
        figures.get("latest", "-"),
        figures.get("best", figures.get("latest", "-")),  # best is latest when no earlier step beat it
        judge_verdict(record),
        str(record["task"].get("description", ""))[:50],
    ]


def load_run(home: Path, name: str) -> dict[str, Any]:
    """The record (run.json) of run `name`; one error line for a name that is no run name (`check_run_name`: no
    path outside the home), naming the runs that exist when there is none, or naming a damaged record."""
    check_run_name(name)
    path = home / "runs" / name / RUN_FILE
    if not path.exists():
        known = ", ".join(r["name"] for r in load_runs(home)) or "none"
        raise AutoRLError(f"no run named {name!r} in {home / 'runs'} (runs: {known})")
    return read_record(path)


def show_table(home: Path, name: str) -> Table:
    record = load_run(home, name)
    description = str(record["task"].get("description", ""))
    table = Table(title=f"{name}: {record.get('status', '?')!s} — {description[:60]}")
    for column in ("stage", "key", "cached", "seconds", "model calls", "figures"):
        table.add_column(column)
    for stage in STAGES:
        entry = record.get("stages", {}).get(stage)
        if entry is None:
            table.add_row(stage, record.get("keys", {}).get(stage, "-"), "-", "-", "-", "not run")
            continue
        figures = json.dumps(entry.get("summary", {}), default=str)
        seconds = entry.get("seconds")
        table.add_row(
            stage, str(record.get("keys", {}).get(stage, "-")), {True: "yes", False: "no"}.get(entry.get("cached"), "-"),
            f"{seconds:.1f}" if isinstance(seconds, int | float) else "-", str(entry.get("model_calls", "-")),
            figures[:120],
        )  # fmt: skip
    return table


def calls_table(record: dict[str, Any]) -> Table | None:
    """The model requests a run's stages made (run.json's `calls`), per stage, kind and model: requests, the
    failed ones by cause, seconds in all, median and slowest, tokens; None when no stage recorded any."""
    table = Table(title="model requests (judge and generator)")
    for column in ("stage", "kind", "model", "requests", "failed", "seconds", "median s", "max s", "tokens in/out"):
        table.add_column(column)
    for stage in STAGES:
        for kind, logged in record.get("stages", {}).get(stage, {}).get("calls", {}).items():
            for model, s in logged["summary"].items():
                failed = ", ".join(f"{cause} {count}" for cause, count in s["failed"].items()) or "-"
                table.add_row(
                    stage, kind, model, str(s["calls"]), failed, f"{s['seconds']:.1f}", f"{s['median_s']:.1f}",
                    f"{s['max_s']:.1f}", f"{s['prompt_tokens']}/{s['completion_tokens']}",
                )  # fmt: skip
    return table if table.rows else None


def cost_table(record: dict[str, Any]) -> Table | None:
    """What making a run's artifacts cost (run.json's `cost` per stage and in all: `pipelines.costs`): seconds,
    tokens per kind, USD of this machine's time and of API models; None for a run recorded before costs were."""
    if "cost" not in record:
        return None
    table = Table(title="cost (tokens of every model call; USD: --price-per-hour and LiteLLM's prices)")
    for column in ("stage", "seconds", *(f"{kind} tokens" for kind in KINDS), "compute USD", "API USD", "total USD"):
        table.add_column(column)
    stages = record.get("stages", {})
    rows = [(stage, stages[stage]["cost"]) for stage in STAGES if "cost" in stages.get(stage, {})]
    for name, cost in [*rows, ("total", record["cost"])]:
        usd = cost["usd"]
        table.add_row(
            name, f"{cost['seconds']:.1f}", *(str(sum(cost["tokens"].get(kind, {}).values())) for kind in KINDS),
            f"{usd['compute']:.4f}", f"{usd['api']:.4f}", f"{usd['total']:.4f}",
        )  # fmt: skip
    if record.get("status") == "budget":
        table.caption = record.get("stopped", "stopped by its budget")
    return table


def step_cost_table(record: dict[str, Any]) -> Table | None:
    """What each training step cost (run.json's train `step_costs`), in a few rows however many steps ran
    (`records.step_costs.step_cost_summary`); None for a run with no priced step."""
    if not (steps := record.get("stages", {}).get("train", {}).get("step_costs")):
        return None
    title, rows = step_cost_summary(steps)
    table = Table(title=title, caption=STEP_COST_NOTE)
    for column in STEP_COST_COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table
