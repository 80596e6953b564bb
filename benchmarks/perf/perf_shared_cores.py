"""Two CPU vLLM servers decoding at once on the same cores: what OpenMP's wait policy costs and saves.

vLLM's CPU engine runs its model in OpenMP threads (PyTorch's libgomp, which vLLM preloads), as many as the
cores it may use. Between parallel regions an idle libgomp thread spins before it sleeps (a spin count of
300,000 where neither `OMP_WAIT_POLICY` nor `GOMP_SPINCOUNT` is set; autorl's CPU servers spin 10,000:
`autorl.serving.environment.CPU_SPINCOUNT`). Alone, that saves a wake-up per region; when two processes' threads share
the cores (two servers, a server and a trainer, the suite's two pytest-xdist workers), a spinning thread holds
a core the other process's threads need.

For each mode (an environment the servers start with, so each libgomp reads it when it loads), two servers of
the embedded model are started (eager, merged serving, no launcher: a launcher's forks inherit its libgomp as
it was loaded); then, `--reps` times: `--requests` concurrent requests of `--tokens` tokens to one server alone,
then the same to both at once (their tokens per second summed). The first mode is the baseline of the ratios.

    libgomp default: GOMP_SPINCOUNT=300000, libgomp's own default
    passive        : OMP_WAIT_POLICY=PASSIVE (an idle thread sleeps at once)
    spin 10k       : GOMP_SPINCOUNT=10000 (spins 30x less before it sleeps: autorl's CPU servers)

    python benchmarks/perf/perf_shared_cores.py   # ~9 min on 2 cores; results/shared_cores.json
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, ratio_entry, summary, write_result
from perf_server_start import EAGER, decode, start

from autorl.serving.vllm_server import VLLMServer

MODES = {
    "libgomp default": {"GOMP_SPINCOUNT": "300000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
}


async def both_at_once(servers: list[VLLMServer], requests: int, tokens: int) -> float:
    """Tokens per second of the servers together, each given the same load at the same moment."""
    rates = await asyncio.gather(*(decode(server, requests, tokens) for server in servers))
    return sum(rates)


def measure(env: dict, reps: int, requests: int, tokens: int, logs: Path) -> tuple[list[float], list[float]]:
    """(one server alone, two at once) tokens per second, `reps` of each, alternated."""
    servers = [start((env, EAGER), logs / f"{i}.log")[0] for i in range(2)]
    alone, together = [], []
    try:
        for rep in range(reps):
            alone.append(asyncio.run(decode(servers[0], requests, tokens)))
            together.append(asyncio.run(both_at_once(servers, requests, tokens)))
            print(f"  rep {rep + 1}: alone {alone[-1]:.0f} tokens/s, two at once {together[-1]:.0f}", flush=True)
    finally:
        for server in servers:
            server.stop()
    return alone, together


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}; the first is the baseline")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    modes = args.modes.split(",")
    started = time.monotonic()
    alone: dict[str, dict] = {}
    together: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            print(f"{mode}: {MODES[mode]}", flush=True)
            one, two = measure(MODES[mode], args.reps, args.requests, args.tokens, Path(tmp))
            alone[mode], together[mode] = summary(one), summary(two)
    conditions = f"embedded model, eager, merged serving, {args.requests} x {args.tokens} tokens, {args.reps} reps"
    baseline = modes[0]
    ratios = []
    for mode in modes:
        ratios.append(ratio_entry(f"two at once vs one alone, {mode}", together[mode]["median"],
                                  alone[mode]["median"], "tokens/s", None, True, conditions))  # fmt: skip
    for mode in modes[1:]:
        ratios.append(ratio_entry(f"one alone, {mode}", alone[mode]["median"], alone[baseline]["median"],
                                  "tokens/s", None, True, conditions))  # fmt: skip
        ratios.append(ratio_entry(f"two at once, {mode}", together[mode]["median"], together[baseline]["median"],
                                  "tokens/s", None, True, conditions))  # fmt: skip
    print_table(ratios)
    result = {"modes": {m: MODES[m] for m in modes}, "ratios": ratios, "alone_tokens_s": alone,
              "two_at_once_tokens_s": together}  # fmt: skip
    print(f"wrote {write_result('shared_cores', result, started)}")


if __name__ == "__main__":
    main()
