"""The embedded judge on a Ray cluster against the local path: RULER scoring the same groups through one local
vLLM server (what a local run's embedded judge asks), and through `ClusterBackend`'s embedded-model replicas
(`judge_replicas` 1 and 2) behind the driver's `PoolProxy` (what a cluster run's embedded judge asks).

Each configuration starts its servers, scores `--groups` groups of 8 answers at once (as a training step's
groups are judged) `--batches` times after a warm-up batch, and stops them; RULER's cache is off, so every
group is a judge call. Reported per batch: seconds and the judge's completion tokens per second, counted by
the servers themselves (its answers' length varies with sampling and a 135M judge's JSON is not always valid, so
some are retried: tokens/s is the fairer rate), and the groups it could not score. Threads are matched as in perf_replicas.py:
the local server and one replica use every core, two replicas half each; on 2 cores two replicas cannot be
faster than one, so what this measures is the cost of the proxy and the Ray actor hop, and that routing
spreads the calls (each replica's share of the judge calls, from its own vLLM counters).

    pip install -e ".[ray]"
    python benchmarks/perf/perf_judge_replicas.py   # ~17 min on 2 cores; writes results/judge_replicas.json
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

from autorl.backends.cluster.backend import ClusterBackend
from autorl.backends.cluster.config import ClusterConfig
from autorl.backends.cluster.ray_cluster import connect
from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer
from autorl.trajectories import Trajectory, TrajectoryGroup
from ruler import JudgeModel, ruler_score_group
from tests.helpers.servers import vllm_metric

TASK = "Turn a casual sentence into formal business English"
ANSWERS = [
    "We would be grateful if you could send the report by Friday.",
    "Send the report by Friday pls.",
    "Kindly forward the report at your earliest convenience, no later than Friday.",
    "I need that report Friday.",
    "Could you please provide the report by the end of the week?",
    "report friday ok?",
    "Please ensure that the report reaches us by Friday.",
    "We kindly request the report by Friday; thank you in advance.",
]


def groups(count: int) -> list[TrajectoryGroup]:
    """`count` groups of the 8 answers, each to a different request (so no two judge prompts are equal)."""

    def group(index: int) -> TrajectoryGroup:
        user = f"Request {index}: yo can u send me the report by friday"
        return TrajectoryGroup(
            [Trajectory(messages_and_choices=[{"role": "user", "content": user}, {"role": "assistant", "content": a}])
             for a in ANSWERS]
        )  # fmt: skip

    return [group(index) for index in range(count)]


def configurations(cores: int) -> dict[str, ClusterConfig | None]:
    """The judge's servers compared: None is one local server (the local path)."""
    return {
        "local": None,
        "ray x1": ClusterConfig(ray="local", replicas=1, judge_replicas=1, replica_cpus=cores),
        "ray x2": ClusterConfig(ray="local", replicas=1, judge_replicas=2, replica_cpus=max(1, cores // 2)),
    }


def generated(servers: list[tuple[str, str]]) -> int:
    return sum(vllm_metric(url, "generation_tokens_total", key) for url, key in servers)


async def score_batches(judge: JudgeModel, count: int, batches: int, urls: list[tuple[str, str]]) -> list[dict]:
    """One warm-up and `batches` measured batches of `count` groups scored at once; each batch's timings. The
    judge's tokens are the servers' own count (retried answers included: a 135M judge's JSON is not always valid)."""
    measured = []
    for batch in range(batches + 1):
        tokens, started = generated(urls), time.perf_counter()
        scoring = (
            ruler_score_group(g, judge, cache_dir=None, task=TASK, swallow_exceptions=True) for g in groups(count)
        )
        scored = await asyncio.gather(*scoring)
        seconds = time.perf_counter() - started
        tokens = generated(urls) - tokens
        if batch:
            failed = sum(s is None for s in scored)
            measured.append({"batch_s": seconds, "judge_tokens_per_s": tokens / seconds, "failed_groups": failed})
    return measured


def measure(home: Path, cluster: ClusterConfig | None, count: int, batches: int) -> tuple[float, list[dict], list[int]]:
    """Start the judge's servers, score the batches, stop them; the start-up time, each batch's timings, and
    the judge calls each server answered."""
    context = ServerConfig().max_model_len
    started = time.perf_counter()
    if cluster is None:
        server = VLLMServer(resolve_base_model(DEFAULT_BASE_MODEL), DEFAULT_BASE_MODEL, home / "vllm.log")
        server.start()
        urls = [(server.base_url.removesuffix("/v1"), server.api_key)]
        endpoint = (server.served_name, server.base_url, server.api_key)
        close = server.stop
    else:
        backend = ClusterBackend(home, cluster=cluster)
        served = backend.placement.embedded_endpoint()
        urls = [(replica.url, replica.key) for replica in backend.placement.embedded_pool.replicas]
        endpoint = (served.model, served.base_url, served.api_key.get_secret_value())
        close = backend.close
    try:
        start_s = time.perf_counter() - started
        before = [vllm_metric(url, "request_success_total", key) for url, key in urls]
        judge = JudgeModel(model=endpoint[0], base_url=endpoint[1], api_key=endpoint[2], context_tokens=context)
        measured = asyncio.run(score_batches(judge, count, batches, urls))
        calls = [vllm_metric(url, "request_success_total", key) - b for (url, key), b in zip(urls, before, strict=True)]
    finally:
        close()
    return start_s, measured, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4, help="groups of 8 answers scored at once per batch")
    parser.add_argument("--batches", type=int, default=3, help="measured batches per configuration and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the configurations, every other reversed")
    args = parser.parse_args()
    began = time.monotonic()
    cores = os.cpu_count() or 1
    configs = configurations(cores)
    connect(configs["ray x2"])
    starts: dict[str, list[float]] = {name: [] for name in configs}
    batches: dict[str, list[dict]] = {name: [] for name in configs}
    calls: dict[str, list[list[int]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory(prefix="autorl-judge-replicas-") as home:
        for round_ in range(args.rounds):
            for name in list(configs)[:: -1 if round_ % 2 else 1]:  # order drift cancels over the rounds
                where = Path(home) / f"{name.replace(' ', '')}-{round_}"
                where.mkdir()
                start_s, measured, answered = measure(where, configs[name], args.groups, args.batches)
                starts[name].append(start_s)
                batches[name] += measured
                calls[name].append(answered)
                print(
                    f"round {round_ + 1} {name}: start {start_s:.1f} s, batches "
                    f"{[round(b['batch_s'], 2) for b in measured]} s, judge calls per server {answered}",
                    flush=True,
                )
    results = {
        name: {"server_start_s": summary(starts[name]), "judge_calls_per_server": calls[name]}
        | {key: summary([b[key] for b in batches[name]]) for key in batches[name][0]}
        for name in configs
    }
    conditions = f"{cores} cores, {args.groups} groups of 8 at once, medians of {args.rounds} x {args.batches} batches"

    rows = [
        median_ratio(results, conditions, "judge tokens/s", "judge_tokens_per_s", "ray x1", "local", True),
        median_ratio(results, conditions, "judge batch time", "batch_s", "ray x1", "local", False),
        median_ratio(results, conditions, "judge tokens/s", "judge_tokens_per_s", "ray x2", "ray x1", True),
        median_ratio(results, conditions, "judge batch time", "batch_s", "ray x2", "ray x1", False),
    ]
    for name, r in results.items():
        print(
            f"{name}: start {r['server_start_s']['median']} s, batch {r['batch_s']['median']:.2f} s "
            f"[{r['batch_s']['min']:.2f}, {r['batch_s']['max']:.2f}], judge {r['judge_tokens_per_s']['median']:.0f} "
            f"tok/s [{r['judge_tokens_per_s']['min']:.0f}, {r['judge_tokens_per_s']['max']:.0f}]"
        )
    print_table(rows)
    path = write_result(
        "judge_replicas",
        {"configurations": {k: (v.model_dump() if v else None) for k, v in configs.items()},
         "results": results, "ratios": rows},
        began,
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
