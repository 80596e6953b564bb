"""Does training teach the embedded model to call a tool? The held-out rate of valid tool calls, base vs trained.

    python benchmarks/perf/learn_tool_use.py [--steps 40] [--seeds 0] [--loss grpo] [--home DIR]
        [-- extra autorl run flags]

Runs `autorl run benchmarks/perf/learning_tasks/tool_call.toml` (unit conversion questions, the `convert`
tool of pipelines/tasks/unit_tools.py, at most 2 model turns) with the program judge
`benchmarks.perf.learning_tasks.judges:tool_call` (1 for a tool call the tool accepted, partial
credit below: a group carries signal before the model calls the tool right), as `learning.py` runs its
tasks. From the evaluate stage's scores (every validation input answered `eval_samples` times by the base
model and by the trained LoRA, judged by the same program) it reports the rate of valid tool calls: the
share of answers scored 1, averaged per input first, with its 95% CI over the inputs, base vs trained, and
the judge's mean reward. Writes `benchmarks/perf/results/learn_tool_use.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd
from _common import write_result
from learning import one_run

from pipelines.evaluation import summarize

TASK = "tool_call"


def valid_call_rates(home: Path, run: str) -> dict[str, dict]:
    """Per variant (base, latest): the share of held-out answers with a valid tool call, its 95% CI, inputs."""
    record = json.loads((home / "runs" / run / "run.json").read_text())
    scores = pd.read_parquet(home / "artifacts" / "evaluate" / record["keys"]["evaluate"] / "scores.parquet")
    rates = summarize(scores.assign(reward=(scores["reward"] >= 1.0).astype(float)))
    return {variant: {key: round(value, 4) for key, value in figures.items()} for variant, figures in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="Training steps per run.")
    parser.add_argument("--seeds", default="0", help="Comma-separated seeds (one run each).")
    parser.add_argument("--loss", default="grpo")
    parser.add_argument("--home", type=Path, default=Path(".autorl-learning"), help="Where the runs are kept.")
    parser.add_argument("extra", nargs="*", help="More `autorl run` flags, after `--`.")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    started, home, runs = time.monotonic(), args.home.resolve(), []
    for seed in (int(s) for s in args.seeds.split(",")):
        run = one_run(TASK, args.loss, seed, args.steps, home, args.extra)
        rates = valid_call_rates(home, f"{TASK}-{args.loss}-seed{seed}")
        runs.append({**run, "valid_call_rate": {"base": rates["base"], "trained": rates["latest"]}})
        base, trained = rates["base"], rates["latest"]
        print(
            f"seed {seed}, {args.steps} steps: valid tool calls on held-out inputs "
            f"base {base['mean']:.3f} [{base['ci_low']:.3f}, {base['ci_high']:.3f}] -> "
            f"trained {trained['mean']:.3f} [{trained['ci_low']:.3f}, {trained['ci_high']:.3f}] "
            f"({base['inputs']} inputs); judge reward {run['base']['mean']:.3f} -> {run['trained']['mean']:.3f}; "
            f"{run['wall_s']:.0f} s",
            flush=True,
        )
    command = ["python", "benchmarks/perf/learn_tool_use.py", *sys.argv[1:]]
    path = write_result("learn_tool_use", {"command": command, "runs": runs}, started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
