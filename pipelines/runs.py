"""Reading run records for `autorl runs` and `autorl show`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from autorl.errors import AutoRLError

from .config import STAGES
from .pipeline import RUN_FILE


def load_runs(home: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted((home / "runs").glob(f"*/{RUN_FILE}")):
        try:
            records.append(json.loads(path.read_text()))
        except json.JSONDecodeError:
            continue
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


def runs_table(home: Path) -> Table:
    caption = (
        "validation reward (inputs scored/validation inputs), every variant judged head to head; judge: the "
        "audit's verdict before training"
    )
    table = Table(title=f"runs in {home / 'runs'}", caption=caption)
    for column in ("name", "status", "steps", "base val", "latest val", "best val", "judge", "task"):
        table.add_column(column)
    for record in load_runs(home):
        figures = validation_figures(record)
        table.add_row(
            record["name"],
            record.get("status", "?"),
            str(record.get("stages", {}).get("train", {}).get("summary", {}).get("steps", "-")),
            figures.get("base", "-"),
            figures.get("latest", "-"),
            figures.get("best", figures.get("latest", "-")),  # best is latest when no earlier step beat it
            judge_verdict(record),
            record["task"]["description"][:50],
        )
    return table


def load_run(home: Path, name: str) -> dict[str, Any]:
    """The record (run.json) of run `name`; one error line naming the runs that exist when there is none."""
    path = home / "runs" / name / RUN_FILE
    if not path.exists():
        known = ", ".join(r["name"] for r in load_runs(home)) or "none"
        raise AutoRLError(f"no run named {name!r} in {home / 'runs'} (runs: {known})")
    return json.loads(path.read_text())


def show_table(home: Path, name: str) -> Table:
    record = load_run(home, name)
    table = Table(title=f"{name}: {record.get('status', '?')} — {record['task']['description'][:60]}")
    for column in ("stage", "key", "cached", "seconds", "model calls", "figures"):
        table.add_column(column)
    for stage in STAGES:
        entry = record.get("stages", {}).get(stage)
        if entry is None:
            table.add_row(stage, record.get("keys", {}).get(stage, "-"), "-", "-", "-", "not run")
            continue
        figures = json.dumps(entry.get("summary", {}), default=str)
        table.add_row(
            stage, record["keys"][stage], "yes" if entry["cached"] else "no",
            f"{entry['seconds']:.1f}", str(entry["model_calls"]), figures[:120],
        )  # fmt: skip
    return table
