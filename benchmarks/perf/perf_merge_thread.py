"""The trainer's update after a LoRA merge on the trainer's own thread, on another thread, or with no merge.

    python benchmarks/perf/perf_merge_thread.py [--steps 5] [--reps 2]
    # writes benchmarks/perf/results/merge_thread.json

What `LocalPlacement.torch_thread` rests on. With merged serving (the CPU default) each step's checkpoint is
merged into the base weights (`LoraMerger.write`, torch matmuls) before the server reloads them. Torch called
from a thread starts an OpenMP thread team for that thread, and one team never goes away: so each setting runs
in a process of its own (`--child`), the processes of the settings alternating in rotated order, `--reps` each.
A process builds a `GRPOTrainer` on the embedded model and a `LoraMerger` (bf16, as the server runs), then
steps `perf_grpo_step`'s G=8 group of 64 sampled tokens (`perf_trainer_attention.group`, two groups, the
defaults) a warm-up step and `--steps` more, saving the checkpoint after each and merging it into a file in
/dev/shm (where `VLLMServer.load_merged` writes it) on the trainer's thread, on a second thread, or not at all.
No server: the update alone, each step's time as `GRPOTrainer.step` reports it, and the process's system CPU
time during the steps (the kernel's share: page faults, futex waits).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, ratio_entry, rotations, summary, write_result

SETTINGS = ("merge on the trainer's thread", "merge on another thread", "no merge")


def child(setting: str, steps: int) -> dict:
    """One process's steps under `setting`: step times and system CPU seconds per step, warm-up excluded."""
    import torch
    from perf_grpo_step import train_config
    from perf_trainer_attention import group

    import autorl as art
    from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
    from autorl.serving.merge import LoraMerger
    from autorl.training.trainer import GRPOTrainer

    model_dir = Path(resolve_base_model(DEFAULT_BASE_MODEL))
    other = ThreadPoolExecutor(1, "merge")
    with tempfile.TemporaryDirectory(prefix="autorl-merge-thread-") as home:
        trainer = GRPOTrainer(model_dir, Path(home), art.TrainerConfig())
        merger = LoraMerger(model_dir, torch.bfloat16)
        groups = [group(trainer.tokenizer, 64, seed=seed) for seed in (1, 2)]
        config = train_config()

        def merge(path: Path) -> None:
            with tempfile.TemporaryDirectory(prefix="autorl-merged-", dir="/dev/shm") as out:
                merger.write(path, Path(out))

        times, system = [], []
        for number in range(steps + 1):  # the first is the warm-up
            before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            metrics = trainer.step(groups, config)
            after = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            path = trainer.save(number + 1, metrics)
            if setting == SETTINGS[0]:
                merge(path)
            elif setting == SETTINGS[1]:
                other.submit(merge, path).result()
            if number:
                times.append(metrics["step_time_s"])
                system.append(after - before)
    return {"step_s": times, "system_cpu_s": system}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="measured steps per process")
    parser.add_argument("--reps", type=int, default=2, help="processes per setting")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    started = time.monotonic()
    import torch

    runs: dict[str, dict[str, list[float]]] = {s: {"step_s": [], "system_cpu_s": []} for s in SETTINGS}
    for number, setting in enumerate(rotations(list(SETTINGS), args.reps), 1):
        command = [sys.executable, __file__, "--child", setting, "--steps", str(args.steps)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"{setting}: the child process failed:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for key, values in result.items():
            runs[setting][key] += values
        print(f"{number}/{len(SETTINGS) * args.reps} {setting}: {statistics.median(result['step_s']):.2f} s/step "
              f"(median of {args.steps})", flush=True)  # fmt: skip
    medians = {s: statistics.median(r["step_s"]) for s, r in runs.items()}
    conditions = (
        f"G=8 x 2 groups, 64 tokens, TrainerConfig()/TrainConfig() defaults, median of {args.steps * args.reps}"
    )
    ratios = [
        ratio_entry(f"trainer step, {SETTINGS[0]} vs {other}", medians[SETTINGS[0]], medians[other], "s/step",
                    None, False, conditions)
        for other in SETTINGS[1:]
    ]  # fmt: skip
    print_table(ratios)
    settings = {"steps": args.steps, "reps": args.reps, "torch_threads": torch.get_num_threads()}
    results = {s: {key: summary(values) for key, values in r.items()} for s, r in runs.items()}
    path = write_result("merge_thread", {"benchmark": __doc__.splitlines()[0], "settings": settings,
                                         "results": results, "ratios": ratios}, started)  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
