"""The GPU path on a real GPU: vLLM on CUDA, 3 GRPO steps with each trainer engine, unsloth vs peft.

    python benchmarks/perf/gpu_check.py [--steps 3] [--home DIR]

Per engine (each in its own process: importing Unsloth patches transformers for the whole process), on
the embedded model behind vLLM on CUDA with adapter serving, the learning benchmark's `one_word` task
(a programmatic judge) and its training inputs: `--steps` steps of 2 groups x 8 rollouts. Prints per
engine the median step time split into rollouts, judge, train (the optimizer step) and LoRA load (save
+ serve), the trainer's peak GPU memory and the GPU's peak use (nvidia-smi, vLLM included), rollout
tokens/s, the sampler logprob gap, and the ratio unsloth / peft of the train time; writes
`benchmarks/perf/results/gpu_check.json`. Needs a CUDA GPU and `./install.sh --gpu`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import LEARNING_TASKS, summary, write_result

ENGINES = ("unsloth", "peft")
GROUP_SIZE, GROUPS_PER_STEP, MAX_TOKENS = 8, 2, 128


def gpu_used_mib() -> int:
    """Memory in use on GPU 0, every process included (nvidia-smi)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(out.stdout.split()[0])


def one_engine(engine: str, steps: int, home: Path) -> dict:
    """Run `steps` GRPO steps with `engine` in this process; its figures."""
    if engine == "unsloth":
        import unsloth  # noqa: F401  (first: it patches transformers and peft)
    import torch

    import autorl as art
    from autorl.agents.rollout import RolloutConfig, agent_rollout, openai_completion
    from autorl.inputs.files import read_inputs_jsonl
    from benchmarks.perf.learning_tasks import judges

    rows = read_inputs_jsonl(LEARNING_TASKS / "inputs.jsonl")
    inputs = [row.input for row in rows if row.split == "train"]
    system = "Answer the user's question with exactly one word and nothing else."
    peak = {"gpu_mib": 0}
    sampling = threading.Event()

    def watch() -> None:
        while not sampling.wait(0.5):
            peak["gpu_mib"] = max(peak["gpu_mib"], gpu_used_mib())

    async def run() -> list[dict]:
        backend = art.LocalBackend(home / engine)
        model = art.TrainableModel(name="gpu-check", project=engine, trainer=art.TrainerConfig(engine=engine))
        await model.register(backend)
        records = []
        try:
            for step in range(steps):
                complete = openai_completion(
                    model.openai_client(), model.get_inference_name(), RolloutConfig(max_tokens=MAX_TOKENS)
                )
                started = time.monotonic()
                texts = [inputs[(step * GROUPS_PER_STEP + i) % len(inputs)] for i in range(GROUPS_PER_STEP)]
                groups = [
                    art.TrajectoryGroup(agent_rollout(complete, system, t) for _ in range(GROUP_SIZE)) for t in texts
                ]
                groups = await art.gather_trajectory_groups(groups, pbar_desc=None)
                rollouts_s = time.monotonic() - started
                started = time.monotonic()
                for group in groups:
                    for trajectory in group.trajectories:
                        trajectory.reward = judges.one_word(trajectory.messages())
                judge_s = time.monotonic() - started
                started = time.monotonic()
                metrics = await model.train(groups, config=art.TrainConfig())
                train_call_s = time.monotonic() - started
                tokens = sum(t.metrics["completion_tokens"] for g in groups for t in g.trajectories)
                records.append({
                    "rollouts_s": rollouts_s, "judge_s": judge_s, "train_s": metrics["step_time_s"],
                    "lora_load_s": train_call_s - metrics["step_time_s"], "tokens_per_s": tokens / rollouts_s,
                    "sampler_logprob_gap": metrics.get("sampler_logprob_gap", float("nan")), "reward": metrics["reward"],
                })  # fmt: skip
                print(
                    f"{engine} step {step + 1}: " + ", ".join(f"{k} {v:.3g}" for k, v in records[-1].items()),
                    flush=True,
                )
        finally:
            backend.close()
        return records

    threading.Thread(target=watch, daemon=True).start()
    try:
        records = asyncio.run(run())
    finally:
        sampling.set()
    later = records[1:] or records  # the first step also loads the trainer
    return {
        "engine": engine,
        **{key: summary([r[key] for r in later]) for key in records[0]},
        "first_step_s": round(sum(records[0][k] for k in ("rollouts_s", "judge_s", "train_s", "lora_load_s")), 2),
        "trainer_peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20),
        "gpu_peak_used_mib": peak["gpu_mib"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per engine.")
    parser.add_argument("--home", type=Path, help="Where runs are written (default: a temporary directory).")
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)  # one engine, in a child process
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="autorl-gpu-check-"))
    if args.engine:
        print("RESULT " + json.dumps(one_engine(args.engine, args.steps, home)), flush=True)
        return
    started = time.monotonic()
    results = {}
    for engine in ENGINES:
        child = subprocess.run(
            [sys.executable, __file__, "--engine", engine, "--steps", str(args.steps), "--home", str(home)],
            capture_output=True, text=True,
        )  # fmt: skip
        print(child.stdout[-4000:], child.stderr[-2000:] if child.returncode else "", sep="\n")
        line = next((x for x in child.stdout.splitlines() if x.startswith("RESULT ")), None)
        results[engine] = json.loads(line.removeprefix("RESULT ")) if line else {"error": child.stderr[-2000:]}
    ok = all("error" not in r for r in results.values())
    if ok:
        for engine, r in results.items():
            print(f"{engine}: step {statistics.fsum(r[k]['median'] for k in ('rollouts_s', 'judge_s', 'train_s', 'lora_load_s')):.2f} s "
                  f"(rollouts {r['rollouts_s']['median']:.2f}, judge {r['judge_s']['median']:.3f}, train {r['train_s']['median']:.2f}, "
                  f"LoRA load {r['lora_load_s']['median']:.2f}); trainer peak {r['trainer_peak_gpu_mib']} MiB, GPU peak "
                  f"{r['gpu_peak_used_mib']} MiB; {r['tokens_per_s']['median']:.0f} tokens/s; gap {r['sampler_logprob_gap']['median']:.3f}")  # fmt: skip
        ratio = results["peft"]["train_s"]["median"] / results["unsloth"]["train_s"]["median"]
        results["train_speedup_unsloth_over_peft"] = round(ratio, 3)
        print(f"train step: unsloth {ratio:.2f}x faster than peft (peft time / unsloth time)")
    path = write_result("gpu_check", {"steps": args.steps, "results": results}, started)
    print(f"wrote {path}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
