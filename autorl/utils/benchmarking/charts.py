"""ART's `art.utils.benchmarking.charts`: a metric of several models, as matplotlib figures.

A model evaluated at several steps is a *trained* model; one evaluated at a single step a *comparison* (a
prompted baseline). Both charts plot the mean of the metric over a model's trajectories at each step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .types import BenchmarkModelKey

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure

TRAINED_COLOR, UNTRAINED_COLOR = "#e67a30", "#e0dcd5"


@dataclass
class Series:
    """One model's means of the metric, by step (ascending)."""

    model: str
    steps: list[int]
    means: list[float]

    @property
    def trained(self) -> bool:
        return len(self.steps) > 1


def metric_series(
    df: pl.DataFrame, metric_name: str, models: list[str | BenchmarkModelKey] | None = None
) -> list[Series]:
    """Each model's mean of `metric_name` (a column, or `metric_<name>`) per step: in `models`' order (each keyed by
    name and split, labelled by its display name), or with `models` None every model of `df`, the trained ones
    first, each kind by name. Raises ValueError for a metric `df` lacks or a selection with no rows."""
    import polars as pl

    column = metric_name if metric_name in df.columns else f"metric_{metric_name}"
    if column not in df.columns:
        raise ValueError(f"column {column!r} not found in the table; it has {list(df.columns)}")
    if models is None:
        selected = df.select("model", "step", pl.col(column).alias("value"))
    else:
        keys = [m if isinstance(m, BenchmarkModelKey) else BenchmarkModelKey(m) for m in models]
        parts = [
            df.filter((pl.col("model") == k.name) & (pl.col("split") == k.split)).select(
                pl.lit(k.display_name).alias("model"), "step", pl.col(column).alias("value")
            )
            for k in keys
        ]
        selected = pl.concat(parts) if parts else df.clear().select("model", "step", pl.lit(0.0).alias("value"))
    if selected.is_empty():
        raise ValueError("no rows for the models and splits asked for; check the model names and their split")
    means = selected.group_by("model", "step").agg(pl.col("value").mean()).sort("model", "step")
    series = {
        name: Series(name, frame["step"].to_list(), [float(v) for v in frame["value"].to_list()])
        for (name,), frame in means.partition_by("model", as_dict=True).items()
    }
    if models is not None:
        order = [k.display_name for k in keys]
        return [series[name] for name in dict.fromkeys(order) if name in series]
    return sorted(series.values(), key=lambda s: (not s.trained, s.model))


def training_progress_chart(
    df: pl.DataFrame,
    metric_name: str,
    models: list[str | BenchmarkModelKey] | None = None,
    title: str | None = None,
    x_label: str | None = None,
    y_label: str | None = None,
    perfect_score: float | None = None,
    legend_loc: str | None = "lower right",
) -> Figure:
    """A line chart of `metric_name`'s mean per step, one line per model (`metric_series`): a trained model's
    line has a marker per step; a comparison model's is a dashed horizontal line across the steps at its one
    value (dotted when another comparison model has the same value). `perfect_score` draws a grey reference
    line labelled "Perfect score". The x axis is labelled `x_label` ("Step" if None), the y axis `y_label`."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    series = metric_series(df, metric_name, models)
    first = min(s.steps[0] for s in series)
    last = max(s.steps[-1] for s in series)
    fig, ax = plt.subplots(figsize=(6, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if perfect_score is not None:
        ax.plot([first, last], [perfect_score, perfect_score], color="dimgray", linewidth=1, label="_nolegend_")
        ax.annotate("Perfect score", (first, perfect_score), xytext=(2, -4), textcoords="offset points",
                    va="top", color="dimgray")  # fmt: skip
    seen: set[float] = set()
    handles = {}
    for index, s in enumerate(series):
        color = colors[index % len(colors)]
        if s.trained:
            (line,) = ax.plot(s.steps, s.means, marker="o", linewidth=2, color=color, label=s.model, zorder=3)
        else:
            style = ":" if s.means[0] in seen else "--"
            seen.add(s.means[0])
            (line,) = ax.plot([first, last], [s.means[0]] * 2, linestyle=style, linewidth=2, color=color, label=s.model)
        handles[s.model] = line
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_title(title if title is not None else metric_name)
    ax.set_xlabel("Step" if x_label is None else x_label)
    if y_label is not None:
        ax.set_ylabel(y_label)
    ax.legend(list(handles.values()), list(handles), loc=legend_loc, frameon=True)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout(pad=1.0)
    return fig


def percentage_comparison_bar_chart(
    df: pl.DataFrame,
    metric_name: str,
    models: list[str | BenchmarkModelKey] | None = None,
    title: str | None = None,
    y_label: str | None = None,
    perfect_score: float | None = None,
    num_decimals: int = 0,
) -> Figure:
    """A bar per model (`metric_series`): its mean at its first step, and for a trained model a hatched segment on
    top from there to its mean at its last step, labelled "RL +N" (a decline is a segment downwards). Values
    all within [0, 1.01] are shown as percentages; each bar is labelled with its total, to `num_decimals`.
    `perfect_score` draws a reference line; `y_label` labels the y axis."""
    import matplotlib.pyplot as plt

    series = metric_series(df, metric_name, models)
    bars = [(s.model, s.means[0], s.means[-1] - s.means[0] if s.trained else 0.0) for s in series]
    top = max(base + gain for _, base, gain in bars)
    scale = 100.0 if top <= 1.01 else 1.0
    unit = "%" if scale == 100.0 else ""
    fig, ax = plt.subplots(figsize=(6, 4))
    for x, (_, base, gain) in enumerate(bars):
        base, gain = base * scale, gain * scale
        ax.bar(x, base, width=0.7, color=TRAINED_COLOR if gain else UNTRAINED_COLOR, edgecolor="white")
        if gain:
            ax.bar(x, gain, width=0.7, bottom=base, color=TRAINED_COLOR, hatch="///", edgecolor="white", alpha=0.95)
            ax.text(x, base + gain / 2, f"RL {gain:+.{num_decimals}f}{unit}", ha="center", va="center",
                    fontweight="bold", bbox={"facecolor": "white", "boxstyle": "round,pad=0.3"})  # fmt: skip
        ax.text(x, base + gain + top * scale * 0.02, f"{base + gain:.{num_decimals}f}{unit}", ha="center",
                va="bottom", fontweight="bold")  # fmt: skip
    if perfect_score is not None:
        ax.plot([-0.5, len(bars) - 0.5], [perfect_score * scale] * 2, color="dimgray", linewidth=1, label="_nolegend_")
        ax.text(-0.4, perfect_score * scale, "Perfect score", va="bottom", ha="left", color="dimgray")
    ax.set_xticks(range(len(bars)), [name for name, _, _ in bars])
    ax.set_yticks([])
    if y_label is not None:
        ax.set_ylabel(y_label)
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.set_title(title if title is not None else metric_name, pad=15)
    return fig
