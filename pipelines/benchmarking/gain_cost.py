"""What a point of held-out score gained over the base model cost: per variant, the USD of making it (its training
steps' recorded spending, `pipelines.costs`) over its mean gain on the inputs both it and the base answered, with
the gain's 95% paired-bootstrap CI turned into the cost's. A point is 0.01 of mean score (one percentage point
of a 0-1 reward)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.stats import mean_ci

from . import scoreboard
from .scoreboard import RESULTS, markdown_table
from .variants import Cost

BASE = "base"
TRAINED = "latest"
"""A run's trained LoRA (its newest checkpoint) as its evaluate stage names it."""
POINT = 0.01
COLUMNS = ["variant", "cost_usd", "gain", "gain_ci_low", "gain_ci_high", "usd_per_point", "usd_per_point_ci"]


def gain_costs(scores: pd.DataFrame, costs: dict[str, Cost], base: str = BASE) -> pd.DataFrame:
    """One row per variant other than `base` (none when `base` was not benchmarked): its cost in USD, its mean
    per-input gain over `base` with a 95% bootstrap CI (inputs both answered), USD per point gained and that
    figure's interval (its high end unbounded, "inf", where the gain's CI reaches 0 or below). `scores`: one
    row per input, one column per variant (`scoreboard.per_input_scores`)."""
    rows = []
    if base not in scores:
        return pd.DataFrame(columns=COLUMNS)
    for variant in scores.columns:
        if variant == base:
            continue
        usd = costs.get(variant, Cost()).usd
        both = scores[[variant, base]].dropna()
        gain = low = high = np.nan
        if len(both):
            gain, low, high = mean_ci(list(both[variant] - both[base]))
        per_point = usd / (gain / POINT) if usd is not None and gain > 0 else np.nan
        interval = ""
        if usd is not None and high > 0:
            interval = (
                f"[{usd / (high / POINT):.4f}, {usd / (low / POINT):.4f}]"
                if low > 0
                else f"[{usd / (high / POINT):.4f}, inf]"
            )
        rows.append(
            {
                "variant": variant,
                "cost_usd": np.nan if usd is None else usd,
                "gain": gain,
                "gain_ci_low": low,
                "gain_ci_high": high,
                "usd_per_point": per_point,
                "usd_per_point_ci": interval,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def run_gain_costs(frame: pd.DataFrame, usd: dict[str, float]) -> pd.DataFrame:
    """A run's trained LoRA against its base model on the evaluate stage's per-input scores (`frame`: input,
    variant, reward), priced once per cost in `usd` (what the cost covers: USD), that name in a first column
    `cost`; no rows when the base was not evaluated."""
    scores = scoreboard.per_input_scores(frame, [BASE, TRAINED])
    tables = [gain_costs(scores, {TRAINED: Cost(usd=dollars)}) for dollars in usd.values()]
    rows = [table.assign(cost=name) for name, table in zip(usd, tables, strict=True) if not table.empty]
    return pd.concat(rows, ignore_index=True)[["cost", *COLUMNS]] if rows else pd.DataFrame(columns=["cost", *COLUMNS])


def markdown(table: pd.DataFrame) -> list[str]:
    """results.md's section on the cost per point gained (nothing when no variant was compared with the base)."""
    if table.empty:
        return []
    return [
        "## Cost per point gained over the base model",
        "",
        "USD of making each variant (its training steps at --price-per-hour and the API models' prices) over its",
        "mean gain on the inputs it and the base answered; a point is 0.01 of mean score; the intervals are 95%",
        "paired-bootstrap (no cost per point where the gain is not above 0).",
        "",
        markdown_table(table),
    ]


CSV = "cost_per_point.csv"


def write(out: Path, table: pd.DataFrame) -> None:
    """`table` as cost_per_point.csv, and its section appended to results.md (written before)."""
    if table.empty:
        return
    table.to_csv(out / CSV, index=False)
    results = out / f"{RESULTS}.md"
    results.write_text(results.read_text(encoding="utf-8") + "\n" + "\n".join(markdown(table)) + "\n", encoding="utf-8")
