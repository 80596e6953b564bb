"""`--async 1` against the synchronous loop on this machine: the train stage's time per trained sample.

    pip install -e ".[ray]"
    python benchmarks/perf/perf_async.py [--steps 8] [--rounds 2] [-- more autorl run flags, e.g. --trainer-workers 2]

Each configuration is `autorl run examples/capitals.toml --judge examples/judges.py:capitals --steps N --seed 0
--preflight off --ray local --async A` in a fresh home, as a user runs it (A = 0: the synchronous loop; A = 1:
`PipelineTrainer`, at most one policy version off-policy); configurations alternate within a round and every
other round is reversed, so a drift of the machine's speed favours neither. Measured from each run's own
records: the train stage's seconds (`run.json`) over the samples it trained (steps x groups per step x group
size), and the per-step wall time (`history.jsonl` `step_time_s`, steps 2 to N: step 1 includes the trainer's
load). Model start-up, the baseline and the evaluation stages are outside the figure.

On a CPU machine the vLLM replica and the trainer share the cores, and a step's update holds new inference
requests back, so what async can overlap here is the judging and the requests in flight with the update, not
generation with training (docs/async.md): this shows what `--async` costs or gains on one CPU box, not what it
gains with rollouts and training on different devices (`replica_simulation.py` models that).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import EXAMPLES, ROOT, median_ratio, print_table, summary, write_result

from autorl.backends.run_dir import read_history

CONFIGURATIONS = {"sync": ["--async", "0"], "async 1": ["--async", "1"]}


def one_run(home: Path, flags: list[str], steps: int, extra: list[str]) -> dict:
    """One `autorl run` to the end; its train-stage seconds, samples trained and per-step times."""
    command = [
        sys.executable, "-m", "pipelines.cli", "run", str(EXAMPLES / "capitals.toml"),
        "--judge", str(EXAMPLES / "judges.py") + ":capitals", "--steps", str(steps), "--seed", "0",
        "--preflight", "off", "--ray", "local", "--home", str(home), "--name", "bench", "--no-wandb", *flags, *extra,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[3:])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    record = json.loads((home / "runs" / "bench" / "run.json").read_text())
    config = record["config"]
    history = [h for h in read_history(home / "runs" / "bench") if "reward" in h]
    samples = sum(h["trajectories"] for h in history)
    if len(history) != steps or samples != steps * config["groups_per_step"] * config["group_size"]:
        raise SystemExit(f"{' '.join(command[3:])} trained {len(history)} steps, {samples} samples: not a full run")
    train_s = record["stages"]["train"]["seconds"]
    return {
        "train_s": train_s,
        "samples": samples,
        "s_per_sample": train_s / samples,
        "step_s": [h["step_time_s"] for h in history[1:]],
        "held_out": record["stages"]["evaluate"]["summary"]["variants"]["latest"]["mean"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per configuration, every other round reversed")
    parser.add_argument("extra", nargs="*", help="more `autorl run` flags for every run (after --)")
    args = parser.parse_args()
    began = time.monotonic()
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGURATIONS}
    with tempfile.TemporaryDirectory(prefix="autorl-async-") as tmp:
        for round_ in range(args.rounds):
            for name in list(CONFIGURATIONS)[:: -1 if round_ % 2 else 1]:
                home = Path(tmp) / f"{name.replace(' ', '')}-{round_}"
                run = one_run(home, CONFIGURATIONS[name], args.steps, args.extra)
                runs[name].append(run)
                print(
                    f"round {round_ + 1} {name}: train {run['train_s']:.0f} s for {run['samples']} samples "
                    f"({run['s_per_sample']:.2f} s each), held-out {run['held_out']:.3f}",
                    flush=True,
                )
    results = {
        name: {
            "s_per_sample": summary([r["s_per_sample"] for r in rs]),
            "train_s": summary([r["train_s"] for r in rs]),
            "step_s": summary([s for r in rs for s in r["step_s"]]),
            "held_out": [r["held_out"] for r in rs],
        }
        for name, rs in runs.items()
    }
    conditions = f"capitals, {args.steps} steps, --ray local {' '.join(args.extra)}".strip()
    rows = [median_ratio(results, conditions + f", {args.rounds} runs each", "train time per sample",
                         "s_per_sample", "async 1", "sync", False)]  # fmt: skip
    for index in range(args.rounds):  # every round's own ratio: rounds that disagree are seen
        this_round = {name: {"step_s": summary(rs[index]["step_s"])} for name, rs in runs.items()}
        label = conditions + f", round {index + 1}, steps 2-{args.steps}"
        rows.append(median_ratio(this_round, label, "step wall time", "step_s", "async 1", "sync", False))
    print_table(rows)
    path = write_result("async_throughput", {"command_flags": args.extra, "results": results, "ratios": rows}, began)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
