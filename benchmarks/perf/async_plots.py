"""The plots of `--async 1 --ray local --trainer-workers 2` against the synchronous loop, from the learning
benchmark's results (no run of its own):

    python benchmarks/perf/async_plots.py [--sync learning_content_capitals] [--async learning_async_claims_capitals]
        [--seeds 0,1,2] [--out docs/images]

Reads `results/<sync>_s<seed>.json` and `results/<async>_s<seed>.json` (each written by `learning.py`) and draws:
- `async_staleness.png`: per seed, the async run's trained groups by staleness (how many policy versions behind
  the trained weights their answers were sampled) and the groups dropped as too stale or tied in score;
- `async_learning.png`: the training reward per step of each seed (thin) and their mean (thick), synchronous
  and async, beside the held-out score of the base model and of the trained LoRA with their 95% CIs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT


def load(name: str, seeds: list[int]) -> list[dict[str, Any]]:
    """The one run of each `results/<name>_s<seed>.json`."""
    runs = []
    for seed in seeds:
        path = RESULTS / f"{name}_s{seed}.json"
        if not path.exists():
            raise SystemExit(f"{path.relative_to(ROOT)} is missing: run learning.py with --out {name}_s{seed}")
        runs.extend(json.loads(path.read_text())["runs"])
    return runs


def plot_staleness(runs: list[dict[str, Any]], path: Path) -> None:
    """Trained groups by staleness and the dropped ones, a bar group per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    missing = [run["seed"] for run in runs if not run.get("pipeline")]
    if missing:
        raise SystemExit(f"the async results of seeds {missing} have no pipeline counts: not --async runs?")
    versions = sorted({int(v) for run in runs for v in run["pipeline"]["staleness"]})
    bars = [(f"trained, {v} behind", lambda p, v=v: p["staleness"].get(str(v), 0)) for v in versions]
    bars += [("dropped stale", lambda p: p["stale_groups"]), ("dropped tied", lambda p: p["tied_groups"])]
    figure, ax = plt.subplots(figsize=(7, 3.6))
    width, top = 0.8 / len(bars), 0
    for index, (label, count) in enumerate(bars):
        xs = [i + (index - (len(bars) - 1) / 2) * width for i in range(len(runs))]
        heights = [count(run["pipeline"]) for run in runs]
        ax.bar(xs, heights, width, label=label)
        top = max(top, *heights)
        for x, h in zip(xs, heights, strict=True):
            ax.text(x, h, str(h), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(runs)), [f"seed {run['seed']}" for run in runs])
    ax.set(
        ylabel="groups",
        ylim=(0, top * 1.35),
        title=f"{runs[0]['task']}, --async 1: groups by staleness ({runs[0]['steps']} steps)",
    )
    ax.legend(fontsize=8, ncol=len(bars), loc="upper center")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_learning(sync: list[dict[str, Any]], pipelined: list[dict[str, Any]], path: Path) -> None:
    """Training reward per step (left) and held-out base vs trained (right), synchronous against async."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, held_out) = plt.subplots(1, 2, figsize=(11, 3.8), width_ratios=[3, 2])
    for color, (label, runs) in zip(("C0", "C1"), (("synchronous", sync), ("--async 1", pipelined)), strict=True):
        per_step: dict[int, list[float]] = {}
        for run in runs:
            steps = run["sentinel"]["per_step"]
            curves.plot([s["step"] for s in steps], [s["reward"] for s in steps], color=color, alpha=0.25, lw=1)
            for s in steps:
                per_step.setdefault(s["step"], []).append(s["reward"])
        xs = sorted(per_step)
        curves.plot(xs, [statistics.mean(per_step[x]) for x in xs], color=color, lw=2.5, label=f"{label} (mean)")
    curves.set(xlabel="step", ylabel="training reward", title="training reward per step (thin: each seed)")
    curves.legend(fontsize=8)
    curves.grid(alpha=0.3)

    rows = [(f"sync s{r['seed']}", r) for r in sync] + [(f"async s{r['seed']}", r) for r in pipelined]
    for index, (_, run) in enumerate(rows):
        for offset, key, color in ((-0.15, "base", "gray"), (0.15, "trained", "C0" if index < len(sync) else "C1")):
            figure_ = run[key]
            held_out.errorbar(
                index + offset, figure_["mean"], fmt="o", color=color, capsize=3,
                yerr=[[figure_["mean"] - figure_["ci_low"]], [figure_["ci_high"] - figure_["mean"]]],
            )  # fmt: skip
    held_out.set_xticks(range(len(rows)), [label for label, _ in rows], rotation=30, fontsize=8)
    held_out.set(ylabel="held-out score", ylim=(0, 1.05), title="held-out: base (gray) vs trained, 95% CI")
    held_out.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync", default="learning_content_capitals", help="results name of the synchronous runs")
    parser.add_argument("--async", dest="pipelined", default="learning_async_claims_capitals",
                        help="results name of the --async runs")  # fmt: skip
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    sync, pipelined = load(args.sync, seeds), load(args.pipelined, seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_staleness(pipelined, args.out / "async_staleness.png")
    plot_learning(sync, pipelined, args.out / "async_learning.png")
    print(f"wrote {args.out / 'async_staleness.png'} and {args.out / 'async_learning.png'}")


if __name__ == "__main__":
    main()
