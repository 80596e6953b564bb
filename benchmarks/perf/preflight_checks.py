"""What the checks before training say: the judge audit and the learnability check on three kinds of run.

    python benchmarks/perf/preflight_checks.py [--home DIR] [--learning-home DIR] [--out NAME]

- The README's command (`autorl run "Reply to a customer asking for a refund, ..." --steps 2 --group-size 4`)
  on the embedded model as policy, generator and judge, with `--preflight strict`: it stops before training
  unless the embedded judge comes out reliable.
- `learning_tasks/json_keys.toml`, an all-or-nothing criterion the embedded base model never meets
  (`judges:json_keys`), with `--preflight strict`: the learnability check must warn and stop it.
- A learning task that learns, judged by a program: each run of `benchmarks/perf/learning.py` found in
  `--learning-home` (its preflight stage ran before its training; nothing is run again here).

Prints each run's verdict lines (as the run printed them) and a table of the figures side by side; writes
`benchmarks/perf/results/preflight.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import LEARNING_JUDGES, LEARNING_TASKS, ROOT, write_result

README_TASK = "Reply to a customer asking for a refund, politely, in two sentences"


def run(home: Path, name: str, task: str, *flags: str) -> dict:
    """One `autorl run` (stopped by `--preflight strict` or not); its preflight figures and printed lines."""
    command = [sys.executable, "-m", "pipelines.cli", "run", task, "--home", str(home), "--name", name,
               "--no-wandb", "--preflight", "strict", *flags]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    record = json.loads((home / "runs" / name / "run.json").read_text())
    if "preflight" not in record.get("stages", {}):
        raise SystemExit(f"{name}: no preflight stage ({done.returncode}):\n{done.stderr[-3000:]}")
    printed = [line for line in done.stderr.splitlines() if line.startswith(("judge ", "learnability", "inputs:", "warning:", "error:"))]  # fmt: skip
    return {
        "name": name,
        "command": ["autorl", *command[3:]],
        "status": record["status"],
        "error": record.get("error"),
        "seconds": round(time.monotonic() - started, 1),
        "stage_seconds": {stage: entry["seconds"] for stage, entry in record["stages"].items()},
        "checks": record["stages"]["preflight"]["summary"],
        "printed": printed,
    }


def from_learning_home(home: Path) -> list[dict]:
    """The preflight figures of the learning benchmark's runs in `home`."""
    runs = []
    for path in sorted(home.glob("runs/*/run.json")):
        record = json.loads(path.read_text())
        if "preflight" in record.get("stages", {}):
            runs.append(
                {"name": record["name"], "status": record["status"], "checks": record["stages"]["preflight"]["summary"]}
            )
    return runs


def row(entry: dict) -> tuple[str, ...]:
    checks = entry["checks"]
    audit, signal = checks["audit"], checks["learnability"]
    reliability = "-" if audit["reliability"] is None else f"{audit['reliability']:.2f}"
    return (
        entry["name"], checks["audit"]["judge"], audit["verdict"], f"{audit['rejudge_gap']:.3f}",
        f"{audit['answer_spread']:.3f}", reliability, f"{audit['position_effect']:+.3f}", f"{audit['duplicate_gap']:.3f}",
        f"{signal['groups_with_signal']}/{signal['groups']}", f"{signal['mean_reward']:.3f}",
        f"{signal['success_rate']:.2f}",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path(".autorl-preflight"), help="Where the two runs are kept.")
    parser.add_argument("--learning-home", type=Path, default=Path(".autorl-learning"), help="learning.py's home.")
    parser.add_argument("--out", default="preflight", help="Result name: writes benchmarks/perf/results/OUT.json.")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    started = time.monotonic()
    home = args.home.resolve()
    runs = [
        run(home, "readme", README_TASK, "--steps", "2", "--group-size", "4"),
        run(home, "json_keys", str(LEARNING_TASKS / "json_keys.toml"), "--judge", f"{LEARNING_JUDGES}:json_keys"),
    ]
    learned = from_learning_home(args.learning_home.resolve())
    for entry in runs:
        print(f"\n{entry['name']} ({entry['status']}, {entry['seconds']:.0f} s):")
        print("\n".join(f"  {line}" for line in entry["printed"]))
    header = ("run", "judge", "verdict", "re-judge gap", "spread", "reliability", "position", "copies",
              "groups with signal", "base mean", "success")  # fmt: skip
    table = [header] + [row(entry) for entry in runs + learned]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print()
    for i, cells in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * width for width in widths))
    command = ["python", "benchmarks/perf/preflight_checks.py", *sys.argv[1:]]
    path = write_result(args.out, {"command": command, "runs": runs, "learning_runs": learned}, started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
