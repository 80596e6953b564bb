"""The trainer's peak memory on long completions: logprobs from chunks of the output head against the whole logits.

    python benchmarks/perf/perf_trainer_memory.py [--tokens 1024] [--micro-batch 8] [--chunk 1024] [--cap-gib 16]
    # writes benchmarks/perf/results/trainer_memory.json

What `TrainerConfig.logprob_chunk_tokens` rests on. One group of `perf_grpo_step`'s G=8 sequences (its chat
prompt, then `--tokens` sampled tokens of plain English as `perf_trainer_attention` builds them, old logprobs
unknown so every ratio is 1) goes through one `GRPOTrainer.step` on the embedded model (the sentinel's base
pass, then the update), `TrainConfig` defaults but the micro-batch (`--micro-batch`, 8: the whole group in
one), with the output head applied `--chunk` positions at a time (this path), the same with gradient
checkpointing (`TrainerConfig.gradient_checkpointing`), and the output head applied to the whole micro-batch
at once (`logprob_chunk_tokens=0`: the plain way, before). Each setting runs in a process of its own, one after
the other, so each peak is its own: the process's resident high-water mark (VmHWM, model weights included)
after loading and after the step. A setting whose resident memory passes `--cap-gib` is killed there (on a
machine shared with other work an out-of-memory kill would take more than the benchmark) and recorded as
killed at that size: its peak is then at least the cap.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, ratio_entry, write_result

from tests.helpers.processes import rss_mib

SETTINGS: dict[str, dict] = {
    "chunked output head": {},
    "chunked output head, gradient checkpointing": {"gradient_checkpointing": True},
    "whole logits (before)": {"logprob_chunk_tokens": 0},
}
"""Setting name -> its `TrainerConfig` fields (`logprob_chunk_tokens` is `--chunk` unless set)."""
BEFORE = "whole logits (before)"


def child(fields: dict, tokens: int, micro_batch: int) -> None:
    """One setting: load, one step, print the figures as one JSON line."""
    from perf_grpo_step import train_config
    from perf_trainer_attention import group

    import autorl as art
    from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
    from autorl.training.trainer import GRPOTrainer

    model_dir = Path(resolve_base_model(DEFAULT_BASE_MODEL))
    with tempfile.TemporaryDirectory(prefix="autorl-memory-") as home:
        trainer = GRPOTrainer(model_dir, Path(home), art.TrainerConfig(**fields))
        loaded = rss_mib(os.getpid())[1]
        metrics = trainer.step(
            [group(trainer.tokenizer, tokens, seed=tokens)], train_config(micro_batch_size=micro_batch)
        )
    figures = {
        "peak_rss_mib_loaded": round(loaded, 1),
        "peak_rss_mib": round(rss_mib(os.getpid())[1], 1),
        "step_s": round(metrics["step_time_s"], 2),
        "tokens": metrics["tokens"],
        "trained_tokens": metrics["trained_tokens"],
        "loss": metrics["loss"],
        "grad_norm": metrics["grad_norm"],
        "entropy": metrics["entropy"],
        "base_logprob": metrics["base_logprob"],
        "dtype": str(trainer.dtype),
    }
    print(json.dumps(figures), flush=True)


def run_setting(fields: dict, args: argparse.Namespace) -> dict:
    """Run `child` in a process of its own, killing it where its resident memory passes the cap."""
    command = [sys.executable, __file__, "--child", json.dumps(fields), "--tokens", str(args.tokens),
               "--micro-batch", str(args.micro_batch)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    cap_mib, peak = args.cap_gib * 1024, 0.0
    while process.poll() is None:
        rss, high = rss_mib(process.pid)
        peak = max(peak, high)
        if rss > cap_mib:
            process.kill()
            process.wait()
            return {"fields": fields, "killed_at_cap": True, "peak_rss_mib": round(peak, 1)}
        time.sleep(0.2)
    lines = process.stdout.read().strip().splitlines() if process.stdout else []
    if process.returncode or not lines:
        return {"fields": fields, "failed": process.returncode, "peak_rss_mib": round(peak, 1)}
    return {"fields": fields, "killed_at_cap": False, **json.loads(lines[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024, help="completion tokens of each sequence")
    parser.add_argument("--micro-batch", type=int, default=8, help="TrainConfig.micro_batch_size (G = 8)")
    parser.add_argument("--chunk", type=int, default=1024, help="this path's TrainerConfig.logprob_chunk_tokens")
    parser.add_argument("--cap-gib", type=float, default=16.0, help="a setting is killed past this resident memory")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(json.loads(args.child), args.tokens, args.micro_batch)
        return
    started = time.monotonic()
    results = {}
    for name, fields in SETTINGS.items():
        results[name] = run_setting({"logprob_chunk_tokens": args.chunk, **fields}, args)
        print(f"{name}: {results[name]}", flush=True)
    conditions = (
        f"one step, G=8 x {args.tokens} completion tokens, micro-batch {args.micro_batch}, embedded model, "
        f"process peak RSS (weights included); a setting is killed past {args.cap_gib:g} GiB"
    )
    rows = [
        ratio_entry(f"trainer peak RSS, {name} vs {BEFORE}", results[name]["peak_rss_mib"],
                    results[BEFORE]["peak_rss_mib"], "MiB", None, False, conditions)
        for name in SETTINGS if name != BEFORE
    ]  # fmt: skip
    print_table(rows)
    command = ["python", "benchmarks/perf/perf_trainer_memory.py", *sys.argv[1:]]
    settings = {"tokens": args.tokens, "micro_batch": args.micro_batch, "chunk": args.chunk, "cap_gib": args.cap_gib}
    path = write_result("trainer_memory", {"benchmark": __doc__.splitlines()[0], "command": command,
                                           "settings": settings, "ratios": rows, "results": results}, started)  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
