"""Is RL worth it here? A prompt tuned by DSPy beside the trained LoRA, on tasks a program judges.

    python benchmarks/perf/prompt_vs_rl.py [--tasks one_word,uppercase,exclaim] [--loss grpo] [--steps 20]
        [--samples 4] [--budget 100] [--home DIR] [--out NAME]

For each task of `benchmarks/perf/learning_tasks/` this reuses the learning benchmark's run under `--home`
as it was recorded, or makes it (`learning.py`: `autorl run TASK.toml --judge ...:<task> --loss LOSS --steps
N`; a recorded run is not rerun, so editing autorl does not retrain it), then runs
`autorl benchmark RUN --variants base,base+optimized,RUN@latest,RUN@latest+optimized --samples S
--optimizer-budget B` as a user would: the optimizer (bootstrap, the default: demonstrations from the
variant's own best-judged answers to train inputs) tunes the base model's and the trained checkpoint's prompt
on the run's train split with the run's program judge, and all four answer the validation split. It reads
the benchmark's results.csv (mean, 95% CI, cost) and winrates.csv, and the optimized prompts.

Prints a table per task and writes `benchmarks/perf/results/prompt_vs_rl.json` (`--out` names another file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from _common import ROOT, write_result
from learning import one_run

TASKS = ("one_word", "uppercase", "exclaim")
PAIRS = (("base+optimized", "base"), ("RUN@latest", "base+optimized"), ("RUN@latest+optimized", "RUN@latest"))
"""Win rates reported: row beats column."""


def benchmark(run: str, home: Path, samples: int, budget: int, out: Path) -> dict:
    """`autorl benchmark` of the four variants; the figures of its results."""
    labels = ["base", "base+optimized", f"{run}@latest", f"{run}@latest+optimized"]
    command = [
        sys.executable, "-m", "pipelines.cli", "benchmark", run, "--variants", ",".join(labels),
        "--samples", str(samples), "--optimizer-budget", str(budget), "--home", str(home), "--out", str(out),
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[3:])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    results = pd.read_csv(out / "results.csv").set_index("variant")
    wins = pd.read_csv(out / "winrates.csv", index_col=0)
    generic = {label: label.replace(f"{run}@", "RUN@") for label in labels}
    variants = {}
    for label in labels:
        row = results.loc[label]
        variants[generic[label]] = {
            "mean": round(float(row["mean"]), 4),
            "ci_low": round(float(row["ci_low"]), 4),
            "ci_high": round(float(row["ci_high"]), 4),
            "inputs": int(row["n"]),
            "cost_calls": None if pd.isna(row["cost_calls"]) else int(row["cost_calls"]),
            "cost_s": None if pd.isna(row["cost_s"]) else round(float(row["cost_s"]), 1),
            "made_by": "" if pd.isna(row["made_by"]) else row["made_by"],
        }
    label_of = {v: k for k, v in generic.items()}
    win_rates = {f"{a} vs {b}": round(float(wins.loc[label_of[a], label_of[b]]), 3) for a, b in PAIRS}
    prompts = {}
    for label, record in json.loads((out / "prompts.json").read_text()).items():
        kept = ("improved", "original_score", "score", "candidates", "calls", "seconds", "system_prompt")
        prompts[generic[label]] = {key: record[key] for key in kept}
        prompts[generic[label]]["demos"] = [f"{m['role']}: {m.get('content') or ''}" for m in record["demos"]]
    examples = _examples(pd.read_csv(out / "scores.csv"), generic)
    return {
        "variants": variants,
        "win_rates": win_rates,
        "prompts": prompts,
        "examples": examples,
        "wall_s": round(time.monotonic() - started, 1),
    }


def _examples(scores: pd.DataFrame, generic: dict[str, str]) -> dict[str, list[str]]:
    """Each variant's answers to the first two held-out inputs, as they read."""
    first = list(dict.fromkeys(scores["input"]))[:2]
    return {
        generic[v]: [str(a)[:160] for a in group[group["input"].isin(first)]["answer"]][:4]
        for v, group in scores.groupby("variant")
    }


def print_task(task: str, figures: dict) -> None:
    print(f"\n{task}")
    header = ("variant", "mean [95% CI]", "cost calls", "cost s", "made by")
    rows = [header] + [
        (
            name,
            f"{v['mean']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]",
            "—" if v["cost_calls"] is None else str(v["cost_calls"]),
            "—" if v["cost_s"] is None else f"{v['cost_s']:.0f}",
            v["made_by"],
        )
        for name, v in figures["variants"].items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print("win rates: " + ", ".join(f"{pair} {rate:.3f}" for pair, rate in figures["win_rates"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS), help="Comma-separated learning tasks.")
    parser.add_argument("--loss", default="grpo", help="The runs' loss variant.")
    parser.add_argument("--steps", type=int, default=20, help="Training steps per run.")
    parser.add_argument("--samples", type=int, default=4, help="Answers per variant and held-out input.")
    parser.add_argument("--budget", type=int, default=100, help="--optimizer-budget of each optimized variant.")
    parser.add_argument("--home", type=Path, default=Path(".autorl-learning"), help="Where the runs are kept.")
    parser.add_argument("--out", default="prompt_vs_rl", help="Result name: writes benchmarks/perf/results/OUT.json.")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    home = args.home.resolve()
    started = time.monotonic()
    tasks = {}
    for task in args.tasks.split(","):
        name = f"{task}-{args.loss}-seed0"
        record = home / "runs" / name / "run.json"
        if not (record.exists() and "evaluate" in json.loads(record.read_text()).get("stages", {})):
            one_run(task, args.loss, 0, args.steps, home, [])
        trained = json.loads(record.read_text())["stages"]["evaluate"]["summary"]["variants"]
        figures = benchmark(name, home, args.samples, args.budget, home / "runs" / name / "benchmark-optimized")
        evaluated = {v: {k: round(trained[v][k], 4) for k in ("mean", "ci_low", "ci_high")} for v in ("base", "latest")}
        tasks[task] = {"run": name, "run_evaluate_stage": evaluated, **figures}
        print_task(task, figures)
    command = ["python", "benchmarks/perf/prompt_vs_rl.py", *sys.argv[1:]]
    settings = {"loss": args.loss, "steps": args.steps, "samples": args.samples, "optimizer_budget": args.budget}
    path = write_result(args.out, {"command": command, "settings": settings, "tasks": tasks}, started)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
