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


def best_validation(record: dict[str, Any]) -> float | None:
    """The best validation reward among the trained variants, if the run was evaluated."""
    summary = record.get("stages", {}).get("evaluate", {}).get("summary", {})
    trained = [s["mean"] for variant, s in summary.items() if variant != "base" and isinstance(s, dict)]
    return max(trained) if trained else None


def runs_table(home: Path) -> Table:
    table = Table(title=f"runs in {home / 'runs'}")
    for column in ("name", "status", "steps", "base val", "best val", "task"):
        table.add_column(column)
    for record in load_runs(home):
        stages = record.get("stages", {})
        base = stages.get("baseline", {}).get("summary", {}).get("mean")
        best = best_validation(record)
        table.add_row(
            record["name"],
            record.get("status", "?"),
            str(stages.get("train", {}).get("summary", {}).get("steps", "-")),
            f"{base:.3f}" if base is not None else "-",
            f"{best:.3f}" if best is not None else "-",
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
