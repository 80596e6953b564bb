"""The Ray path against the local path on this machine: rollout throughput and GRPO step time with the policy
served by one local vLLM server (`LocalBackend`), by one Ray replica, and by two (`ClusterBackend`).

Each configuration runs the step of benchmarks/perf/perf_grpo_step.py through the public API: G=8 rollouts
of one prompt, exactly 64 completion tokens each, a program judge, then `model.train()` (update on the trainer,
checkpoint, the new LoRA served by every replica). One warm-up step (the trainer loads), then `--steps`
measured ones; medians and spread. The configurations run one after another, each with its own servers
(started and stopped in turn; on 2 cores two at once would measure their contention), in `--rounds` rounds,
every other one in reverse order so that a drift of the machine's speed does not favour one.

Threads are matched: the local server and trainer use every core; Ray x1 gives its replica and the trainer
every core; Ray x2 gives each replica half of them (the trainer every core: the replicas wait while it runs).
On 2 cores two replicas cannot be faster than one: what this measures is the cost of the Ray path (routing,
actor calls, the LoRA through the object store, two merges instead of one).

    pip install -e ".[ray]"
    python benchmarks/perf/perf_replicas.py   # ~13 min on 2 cores; writes benchmarks/perf/results/replicas.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median_ratio, print_table, summary, write_result
from perf_grpo_step import COMPLETION_TOKENS, GROUP_SIZE, Ours

import autorl as art
from autorl.backends.cluster.backend import ClusterBackend
from autorl.backends.cluster.config import ClusterConfig
from autorl.backends.cluster.ray_cluster import connect


def configurations(cores: int) -> dict[str, ClusterConfig | None]:
    """The backends compared: None is the local path."""
    return {
        "local": None,
        "ray x1": ClusterConfig(ray="local", replicas=1, replica_cpus=cores, trainer_cpus=cores),
        "ray x2": ClusterConfig(ray="local", replicas=2, replica_cpus=max(1, cores // 2), trainer_cpus=cores),
    }


async def measure(home: Path, cluster: ClusterConfig | None, steps: int) -> tuple[float, list[dict]]:
    """Start the backend's servers, run one warm-up and `steps` measured GRPO steps, stop them; returns the
    start-up time and each measured step's timings."""
    backend = art.LocalBackend(home) if cluster is None else ClusterBackend(home, cluster=cluster)
    model = art.TrainableModel(name="bench", project="replicas")
    started = time.perf_counter()
    try:
        await model.register(backend)
        start_s = time.perf_counter() - started
        side = Ours(model)
        for _ in range(steps + 1):
            await side.step()
    finally:
        backend.close()
    for step in side.steps:
        step["rollout_tokens_per_s"] = GROUP_SIZE * COMPLETION_TOKENS / step["rollouts_s"]
        step["checkpoint_and_serve_s"] = step["train_and_serve_s"] - step["trainer_update_s"]
    return start_s, side.steps[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="measured GRPO steps per configuration and round")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds over the configurations, every other one reversed"
    )
    args = parser.parse_args()
    began = time.monotonic()
    cores = os.cpu_count() or 1
    configs = configurations(cores)
    t0 = time.perf_counter()
    connect(configs["ray x2"])  # once for both Ray configurations (the cluster is as large as ray x2 asks)
    ray_start_s = time.perf_counter() - t0
    starts: dict[str, list[float]] = {name: [] for name in configs}
    steps: dict[str, list[dict]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory(prefix="autorl-replicas-") as home:
        for round_ in range(args.rounds):
            for name in list(configs)[:: -1 if round_ % 2 else 1]:  # order drift cancels over the rounds
                where = Path(home) / f"{name.replace(' ', '')}-{round_}"
                start_s, measured = asyncio.run(measure(where, configs[name], args.steps))
                starts[name].append(start_s)
                steps[name] += measured
                print(
                    f"round {round_ + 1} {name}: start {start_s:.1f} s, steps {[round(s['total_s'], 2) for s in measured]} s",
                    flush=True,
                )
    results = {
        name: {"server_start_s": summary(starts[name])}
        | {key: summary([s[key] for s in steps[name]]) for key in steps[name][0]}
        for name in configs
    }
    for name, r in results.items():
        print(
            f"{name}: start {r['server_start_s']['median']} s, rollouts {r['rollout_tokens_per_s']['median']:.0f} tok/s "
            f"[{r['rollout_tokens_per_s']['min']:.0f}, {r['rollout_tokens_per_s']['max']:.0f}], step "
            f"{r['total_s']['median']:.2f} s [{r['total_s']['min']:.2f}, {r['total_s']['max']:.2f}] (trainer update "
            f"{r['trainer_update_s']['median']:.2f} s, checkpoint + serve {r['checkpoint_and_serve_s']['median']:.2f} s)"
        )
    conditions = (
        f"{cores} cores, G={GROUP_SIZE} x {COMPLETION_TOKENS} tokens, medians of {args.rounds} x {args.steps} steps"
    )

    rows = [
        median_ratio(results, conditions, "rollout throughput", "rollout_tokens_per_s", "ray x1", "local", True),
        median_ratio(results, conditions, "GRPO step time", "total_s", "ray x1", "local", False),
        median_ratio(results, conditions, "checkpoint + serve", "checkpoint_and_serve_s", "ray x1", "local", False),
        median_ratio(results, conditions, "rollout throughput", "rollout_tokens_per_s", "ray x2", "ray x1", True),
        median_ratio(results, conditions, "GRPO step time", "total_s", "ray x2", "ray x1", False),
    ]
    print_table(rows)
    print(f"Ray start-up (a local cluster, once per run): {ray_start_s:.1f} s")
    path = write_result(
        "replicas",
        {"configurations": {k: (v.model_dump() if v else None) for k, v in configs.items()},
         "ray_start_s": round(ray_start_s, 1), "results": results, "ratios": rows},
        began,
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
