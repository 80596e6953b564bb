"""The results of a variant benchmark: score table with bootstrap CIs and each variant's cost, win rates, bar
chart, and their files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from pipelines.evaluation import summarize

from .variants import Cost

RESULTS, WINRATES, SCORES, CHART = "results", "winrates.csv", "scores.csv", "scores.png"
COLUMNS = [
    "variant",
    "mean",
    "ci_low",
    "ci_high",
    "n",
    "cost_calls",
    "cost_s",
    "cost_usd",
    "made_by",
    "failed",
    "error",
]
SPENT = "cost.json"
"""What the benchmark itself spent answering and judging (`pipelines.records.pricing.priced`), beside results.md."""
TIE = 1e-9
"""Per-input scores closer than this count as a tie."""


@dataclass
class Outcome:
    """How a variant's answering went."""

    answered: int
    """Inputs it answered (at least one answer)."""
    inputs: int
    """Inputs it was asked."""
    errors: list[str] = field(default_factory=list)
    """One line per failed request."""


def per_input_scores(frame: pd.DataFrame, variants: list[str]) -> pd.DataFrame:
    """One row per input, one column per variant: the mean score of its answers (NaN where it has none)."""
    if frame.empty:
        return pd.DataFrame(columns=variants, dtype=float)
    table = frame.pivot_table(index="input", columns="variant", values="reward", aggfunc="mean")
    return table.reindex(columns=variants)


def win_rates(scores: pd.DataFrame) -> pd.DataFrame:
    """Row beats column: over the inputs both have a score for, the fraction where the row's score is
    higher, a tie counting one half. The diagonal, and pairs with no input in common, are NaN."""
    variants = list(scores.columns)
    table = pd.DataFrame(np.nan, index=pd.Index(variants, name="variant"), columns=variants)
    for row in variants:
        for column in variants:
            both = scores[[row, column]].dropna() if row != column else scores.iloc[:0]
            if both.empty:
                continue
            difference = (both.iloc[:, 0] - both.iloc[:, 1]).to_numpy()
            ties = np.abs(difference) <= TIE
            table.loc[row, column] = float(np.mean((difference > 0) & ~ties) + 0.5 * np.mean(ties))
    return table


def results_table(
    frame: pd.DataFrame, outcomes: dict[str, Outcome], costs: dict[str, Cost] | None = None
) -> pd.DataFrame:
    """One row per variant, in `outcomes`' order: mean score over inputs (each input's answers averaged
    first), its 95% bootstrap CI, inputs scored, what making it cost (`costs`; none given: 0), whether the
    variant failed (no answer at all), and the first error."""
    summary = summarize(frame)
    rows = []
    for variant, outcome in outcomes.items():
        cost = (costs or {}).get(variant, Cost())
        s = summary.get(variant, {})
        failed = outcome.answered == 0
        if failed:
            error = outcome.errors[0] if outcome.errors else "no answer"
        elif outcome.errors:
            error = f"{len(outcome.errors)} requests failed, first: {outcome.errors[0]}"
        else:
            error = "" if s else "no answer was scored"
        rows.append(
            {
                "variant": variant,
                "mean": s.get("mean", np.nan),
                "ci_low": s.get("ci_low", np.nan),
                "ci_high": s.get("ci_high", np.nan),
                "n": int(s.get("inputs", 0)),
                "cost_calls": cost.calls,
                "cost_s": np.nan if cost.seconds is None else cost.seconds,
                "cost_usd": np.nan if cost.usd is None else cost.usd,
                "made_by": cost.made_by,
                "failed": failed,
                "error": error,
            }
        )
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.astype({"cost_calls": "Int64"})  # a whole number, or missing where it was not recorded


def markdown_table(frame: pd.DataFrame, index: bool = False) -> str:
    """A GitHub markdown table; numbers with 3 decimals, NaN as an em dash."""

    def cell(value: object) -> str:
        if value is pd.NA or value is None:
            return "—"
        if isinstance(value, bool | np.bool_):
            return "yes" if value else ""
        if isinstance(value, float | np.floating):
            return "—" if np.isnan(value) else f"{value:.3f}"
        return str(value).replace("|", "\\|").replace("\n", " ")

    header = ([frame.index.name or ""] if index else []) + [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, row in frame.iterrows():
        cells = ([cell(label)] if index else []) + [cell(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: pd.DataFrame, path: Path, title: str) -> None:
    """Bar chart of mean scores with 95% CI error bars; a failed or unscored variant is marked, not drawn."""
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(results) + 2), 4), dpi=100)
    x = np.arange(len(results))
    means = results["mean"].fillna(0).to_numpy()
    errors = np.vstack(
        [(results["mean"] - results["ci_low"]).fillna(0), (results["ci_high"] - results["mean"]).fillna(0)]
    )
    ax.bar(x, means, yerr=errors, capsize=6, color="#4c72b0")
    for i, row in enumerate(results.itertuples()):
        if row.failed or np.isnan(row.mean):
            ax.text(i, 0.02, "failed" if row.failed else "unscored", ha="center", va="bottom", color="#c44e52")
    crowded = len(results) * max(len(v) for v in results["variant"]) > 40
    ax.set_xticks(x, results["variant"], rotation=25 if crowded else 0, ha="right" if crowded else "center", fontsize=8)
    ax.set_ylabel("mean score (95% bootstrap CI)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write(
    out: Path,
    title: str,
    about: str,
    results: pd.DataFrame,
    wins: pd.DataFrame,
    scores: pd.DataFrame,
    prompts: list[str] | None = None,
    spent: dict[str, Any] | None = None,
) -> None:
    """results.md, results.csv, winrates.csv, scores.csv (every judged answer) and scores.png into `out`;
    `prompts` are results.md's sections on optimized prompts; `spent`, what the benchmark spent answering and
    judging, goes into cost.json and its own section."""
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / f"{RESULTS}.csv", index=False)
    wins.to_csv(out / WINRATES)
    scores.to_csv(out / SCORES, index=False)
    plot(results, out / CHART, title.replace("`", ""))
    shown = results.assign(
        **{
            "95% CI": [_interval(r.ci_low, r.ci_high) for r in results.itertuples()],
            "cost (s)": [_seconds(r.cost_s) for r in results.itertuples()],
            "cost (USD)": [_usd(r.cost_usd) for r in results.itertuples()],
        }
    ).rename(columns={"cost_calls": "cost (calls)", "made_by": "made by"})
    columns = ["variant", "mean", "95% CI", "n", "cost (calls)", "cost (s)", "cost (USD)", "made by", "failed", "error"]
    lines = [
        f"# {title}",
        "",
        about,
        "",
        markdown_table(shown[columns]),
        "",
        "Cost: the model calls, seconds and USD it took to make a variant (a checkpoint's training steps, as its run",
        "priced them; an optimized prompt's optimizer; both for an optimized checkpoint); answering these inputs is",
        "not counted there (see what this benchmark spent).",
        "",
        f"![mean score per variant]({CHART})",
        "",
        "## Win rates",
        "",
        "Fraction of the inputs both variants answered where the row's variant scored higher than the",
        "column's (a tie counts one half).",
        "",
        markdown_table(wins, index=True),
    ]
    if spent is not None:
        (out / SPENT).write_text(json.dumps(spent, indent=2) + "\n", encoding="utf-8")
        lines += ["", "## What this benchmark spent", "", *spent_lines(spent)]
    if prompts:
        lines += ["", "## Optimized prompts", "", *"\n\n".join(prompts).splitlines()]
    (out / f"{RESULTS}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def spent_lines(spent: dict[str, Any]) -> list[str]:
    """What the benchmark spent, in words: seconds, tokens by kind, USD; cached answers and judgements cost 0."""
    kinds = ", ".join(f"{kind} {sum(sides.values())}" for kind, sides in spent["tokens"].items()) or "none"
    usd = spent["usd"]
    lines = [
        f"This invocation answered and judged for {spent['seconds']:.0f} s; tokens: {kinds}; "
        f"${usd['total']:.4f} (this machine's time ${usd['compute']:.4f}, API tokens ${usd['api']:.4f}). "
        "What came from the cache cost nothing again."
    ]
    if unpriced := spent.get("unpriced"):
        lines.append(f"Not in LiteLLM's price table, so counted in tokens only: {', '.join(unpriced)}.")
    return lines


def _seconds(value: float) -> str:
    return "—" if np.isnan(value) else f"{value:.0f}"


def _usd(value: float) -> str:
    return "—" if np.isnan(value) else f"{value:.4f}"


def _interval(low: float, high: float) -> str:
    return "—" if np.isnan(low) else f"[{low:.3f}, {high:.3f}]"
