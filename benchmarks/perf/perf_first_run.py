"""The README's run command as a new user meets it, on an older commit and on this checkout, side by side.

    python benchmarks/perf/perf_first_run.py --baseline REV [--repeats 2] [--keep DIR]

Runs `autorl run TASK --steps 2 --group-size 4` (the README's command) in a fresh home each time, as a
subprocess: alternately the commit `--baseline` (checked out in a temporary git worktree, run from there
with its own CLI module) and this checkout, `--repeats` times each. Reads what each run recorded in its
`run.json`: per stage the seconds, the model calls and what the judge did (groups, retries, failures,
answers shortened), the vLLM servers started. The converted embedded model in the user cache
(`~/.cache/autorl`) and the compile caches are shared by both, as on a user's second run; delete them to
time a first install, or pass `--cold`: each run then gets caches of its own in its home (the converted model,
vLLM's and Inductor's compile caches), as on a new machine. Without `--baseline` only this checkout runs.
`--out NAME` writes results/NAME.json.

Prints a table per run and, per commit, the median (min-max) of the wall time, each stage, server starts
and model calls, and the ratio of the medians; writes `benchmarks/perf/results/first_run.json`.
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

from _common import baseline_checkout, commit, print_table, ratio_entry, summary, write_result

TASK = "Reply to a customer asking for a refund, politely, in two sentences"
COMMAND = ["run", TASK, "--steps", "2", "--group-size", "4"]
STAGES = ("inputs", "system_prompt", "baseline", "preflight", "train", "evaluate", "report")
"""Every stage either commit may have (a stage a commit lacks is left out of its figures)."""
JUDGING = ("groups", "retries", "failed", "shortened")


def cli_module(checkout: Path) -> str:
    """The module of a checkout's `autorl` command: pipelines.cli since the layout of issue 23, autorl.cli before."""
    return "pipelines.cli" if (checkout / "pipelines" / "cli.py").is_file() else "autorl.cli"


COLD_CACHES = {"AUTORL_CACHE": "autorl", "VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "inductor"}
"""The caches a `--cold` run gets anew (under its home's `caches/`): the converted model, vLLM's and Inductor's."""


def one_run(checkout: Path, home: Path, cold: bool = False) -> dict:
    """Run the README command from `checkout` in `home` (`cold`: with caches of its own there); its figures from
    run.json, and the command's wall time."""
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    if cold:
        env.update({name: str(home / "caches" / folder) for name, folder in COLD_CACHES.items()})
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", cli_module(checkout), *COMMAND, "--home", str(home)],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the run from {checkout} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    record = json.loads(next((home / "runs").glob("*/run.json")).read_text())
    stages = {}
    for stage in STAGES:
        if stage not in record["stages"]:
            continue
        entry = record["stages"][stage]
        judging = entry["summary"].get("judging", {})
        stages[stage] = {
            "seconds": entry["seconds"],
            "model_calls": entry["model_calls"],
            **{f"judge_{kind}": judging.get(kind, 0) for kind in JUDGING},
            **({"time": entry["summary"]["time"]} if "time" in entry["summary"] else {}),
            **({"calls": {k: v["summary"] for k, v in entry["calls"].items()}} if "calls" in entry else {}),
        }
    groups = sum(s["judge_groups"] for s in stages.values())
    retries = sum(s["judge_retries"] for s in stages.values())
    evaluate = record["stages"]["evaluate"]["summary"]
    return {
        "wall_s": round(wall, 1),
        "stages": stages,
        "model_calls": sum(record["model_calls"].values()),
        "model_calls_by_kind": record["model_calls"],
        "server_starts": record["server_starts"],
        "time": record.get("time"),  # where the time went (autorl.activity), where the commit records it
        "judge_retries_per_group": round(retries / groups, 3) if groups else None,
        "val_inputs": evaluate["val_inputs"],
        "val_inputs_scored": {variant: s["inputs"] for variant, s in evaluate["variants"].items()},
        "stderr_tail": done.stderr[-4000:],
    }


def print_run(label: str, run: dict) -> None:
    print(
        f"\n{label}: {run['wall_s']:.0f} s, {run['server_starts']} vLLM server starts, model calls {run['model_calls']}"
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


def figures(runs: list[dict]) -> dict:
    """Median, min, max of each figure over `runs`."""
    result = {
        "wall_s": summary([r["wall_s"] for r in runs]),
        "server_starts": summary([r["server_starts"] for r in runs]),
        "model_calls": summary([r["model_calls"] for r in runs]),
        "judge_retries_per_group": summary([r["judge_retries_per_group"] or 0.0 for r in runs]),
    }
    for stage in STAGES:
        if all(stage in r["stages"] for r in runs):
            result[f"{stage}_s"] = summary([r["stages"][stage]["seconds"] for r in runs])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="The commit to compare with (e.g. the one before a change).")
    parser.add_argument("--repeats", type=int, default=2, help="Runs per commit, alternating, each in a fresh home.")
    parser.add_argument("--keep", type=Path, help="Keep the homes under this directory (default: deleted).")
    parser.add_argument("--cold", action="store_true", help="Each run with caches of its own, as a new machine.")
    parser.add_argument("--out", default="first_run", help="The result's name (results/NAME.json).")
    args = parser.parse_args()
    started = time.monotonic()
    with baseline_checkout(args.baseline) as checkouts:
        runs: dict[str, list[dict]] = {label: [] for label in checkouts}
        for number in range(1, args.repeats + 1):
            for label, checkout in checkouts.items():  # alternating: each pair under the same machine state
                home = (args.keep / f"{label.replace(' ', '-')}-{number}") if args.keep else None
                with tempfile.TemporaryDirectory(prefix="autorl-first-run-") as tmp:
                    runs[label].append(one_run(checkout, home or Path(tmp), args.cold))
                print_run(f"{label}, run {number}", runs[label][-1])
    per_commit = {label: figures(r) for label, r in runs.items()}
    print("\nmedian (min-max) over runs:")
    for label, values in per_commit.items():
        print(f"  {label}:")
        for name, s in values.items():
            print(f"    {name}: {s['median']:g} ({s['min']:g}-{s['max']:g})")
    rows = []
    if args.baseline:
        old, new = per_commit[f"baseline {args.baseline}"], per_commit["this checkout"]
        caches = "fresh caches" if args.cold else "shared caches"
        conditions = f"the README command, fresh homes, {caches}, {args.repeats} runs each, alternating"
        rows = [
            ratio_entry(f"first run wall time, this checkout vs {args.baseline}", new["wall_s"]["median"],
                        old["wall_s"]["median"], "s", 2.5, False, conditions),
        ]  # fmt: skip
        print_table(rows)
    result = {
        "command": ["autorl", *COMMAND],
        "baseline": args.baseline,
        "cold": args.cold,
        "this_checkout": commit(),
        "figures": per_commit,
        "ratios": rows,
        "runs": runs,
    }
    path = write_result(args.out, result, started)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
