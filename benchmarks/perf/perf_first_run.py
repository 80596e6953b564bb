"""The README's run command as a new user meets it: each stage's time, model calls, judge retries, servers.

    python benchmarks/perf/perf_first_run.py [--repeats N] [--keep HOME]

Runs `autorl run TASK --steps 2 --group-size 4` (the README's command) in a fresh home each time, as a
subprocess, and reads what the run recorded in its `run.json`: per stage the seconds, the model calls and
what the judge did (groups, retries, failures, answers shortened to fit its context), and the vLLM servers
the run started. The converted embedded model in the user cache (`~/.cache/autorl`) and vLLM's compile
cache are reused, as on a user's second run; delete them to time a first install.

Prints a table per run and the median (min-max) over runs; writes `benchmarks/perf/results/first_run.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import summary, write_result

from pipelines.config import STAGES

TASK = "Reply to a customer asking for a refund, politely, in two sentences"
COMMAND = ["run", TASK, "--steps", "2", "--group-size", "4"]
JUDGING = ("groups", "retries", "failed", "shortened")


def one_run(home: Path) -> dict:
    """Run the README command in `home`; its figures from run.json, and the wall time of the command."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *COMMAND, "--home", str(home)],
        capture_output=True,
        text=True,
        env={**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")},
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    record = json.loads(next((home / "runs").glob("*/run.json")).read_text())
    stages = {}
    for stage in STAGES:
        entry = record["stages"][stage]
        judging = entry["summary"].get("judging", {})
        stages[stage] = {
            "seconds": entry["seconds"],
            "model_calls": entry["model_calls"],
            **{f"judge_{kind}": judging.get(kind, 0) for kind in JUDGING},
        }
    groups = sum(s["judge_groups"] for s in stages.values())
    retries = sum(s["judge_retries"] for s in stages.values())
    evaluate = record["stages"]["evaluate"]["summary"]
    return {
        "wall_s": round(wall, 1),
        "stages": stages,
        "model_calls": record["model_calls"],
        "server_starts": record["server_starts"],
        "judge_retries_per_group": round(retries / groups, 3) if groups else None,
        "val_inputs": evaluate["val_inputs"],
        "val_inputs_scored": {variant: s["inputs"] for variant, s in evaluate["variants"].items()},
    }


def print_run(number: int, run: dict) -> None:
    print(
        f"\nrun {number}: {run['wall_s']:.0f} s, {run['server_starts']} vLLM server starts, model calls {run['model_calls']}"
    )
    header = ("stage", "seconds", "model calls", *(f"judge {kind}" for kind in JUDGING))
    rows = [header] + [
        (stage, f"{s['seconds']:.1f}", str(s["model_calls"]), *(str(s[f"judge_{kind}"]) for kind in JUDGING))
        for stage, s in run["stages"].items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)))
    scored = ", ".join(f"{variant} {n}/{run['val_inputs']}" for variant, n in run["val_inputs_scored"].items())
    print(f"judge retries per group: {run['judge_retries_per_group']}; validation inputs scored: {scored}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="Runs, each in a fresh home.")
    parser.add_argument("--keep", type=Path, help="Keep the homes under this directory (default: deleted).")
    args = parser.parse_args()
    started = time.monotonic()
    runs = []
    for number in range(1, args.repeats + 1):
        if args.keep:
            home = args.keep / f"home{number}"
            runs.append(one_run(home))
        else:
            with tempfile.TemporaryDirectory(prefix="autorl-first-run-") as tmp:
                runs.append(one_run(Path(tmp)))
        print_run(number, runs[-1])
    figures = {
        "wall_s": summary([r["wall_s"] for r in runs]),
        "server_starts": summary([r["server_starts"] for r in runs]),
        "judge_retries_per_group": summary([r["judge_retries_per_group"] or 0.0 for r in runs]),
        **{f"{stage}_s": summary([r["stages"][stage]["seconds"] for r in runs]) for stage in STAGES},
    }
    if args.repeats > 1:
        print("\nmedian (min-max) over runs:")
        for name, s in figures.items():
            print(f"  {name}: {s['median']:g} ({s['min']:g}-{s['max']:g})")
    path = write_result("first_run", {"command": ["autorl", *COMMAND], "figures": figures, "runs": runs}, started)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
