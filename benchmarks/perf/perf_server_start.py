"""vLLM server start-up on CPU: what each start costs, and what each way of starting costs while decoding.

Each mode is a fresh `VLLMServer` on the embedded model with merged serving (the CPU default), started
`--reps` times in rotated order after one unmeasured start per mode that fills its caches; the first mode
given is the baseline of the ratios. Two sets of modes (`--set`):

`start` (the default; eager, autorl's CPU default since issue 54, vs how it started before):
    spawn, full KV : vLLM's own start on CPU: its engine process spawned (importing vLLM again), a KV cache
                     for 32 sequences of 2048 tokens (the baseline)
    fork, full KV  : the engine process forked from the server process (`ServerConfig.cpu_fork`)
    fork           : forked, and the KV cache sized for rollouts (`autorl.serving.memory.KV_TOKENS_PER_SEQUENCE`):
                     autorl's default now
    launcher       : as `fork`, forked by a launcher that has vLLM imported (`autorl.serving.launcher`), started
                     once before the reps; its first start (the launcher's own import included) is reported
                     apart, as `launcher, first start`
  and, per rep, two servers started at once (`two at once`, `two at once, launcher`: the seconds until both
  are up), each against one server of its mode.

`compile` (torch.compile, which a first start on a machine pays; `results/server_start.json`):
    vLLM default : the environment as vLLM reads it (the baseline)
    no AOT       : VLLM_USE_AOT_COMPILE=0, vLLM's older compile cache (Inductor's cached code is reused)
    eager        : --enforce-eager, no torch.compile at all

For each: seconds from start to a healthy server, and decode throughput on `--requests` concurrent
chat requests of exactly `--tokens` completion tokens (ignore_eos), seeded, temperature 1.

    python benchmarks/perf/perf_server_start.py                 # ~12 min on 2 cores; results/server_start_eager.json
    python benchmarks/perf/perf_server_start.py --set compile   # ~12 min; results/server_start.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, ratio_entry, rotations, summary, write_result
from openai import AsyncOpenAI

from autorl.serving.config import CPU_MAX_NUM_SEQS, ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.launcher import LAUNCHER_ENV, start_launcher
from autorl.serving.memory import KV_BLOCK_TOKENS, kv_bytes_per_token
from autorl.serving.vllm_server import VLLMServer

MODEL = resolve_base_model(DEFAULT_BASE_MODEL)
FULL_KV = CPU_MAX_NUM_SEQS * (2048 // KV_BLOCK_TOKENS + 1) * KV_BLOCK_TOKENS * kv_bytes_per_token(MODEL, "float32")
"""The KV cache autorl sized before issue 54 (float32): 32 sequences of 2048 tokens in whole blocks, plus one."""
EAGER = {"enforce_eager": True}
SETS = {
    "start": {
        "spawn, full KV": ({}, {**EAGER, "cpu_fork": False, "kv_cache_bytes": FULL_KV}),
        "fork, full KV": ({}, {**EAGER, "kv_cache_bytes": FULL_KV}),
        "fork": ({}, EAGER),
        "launcher": ({LAUNCHER_ENV: "(the launcher's socket)"}, EAGER),
    },
    "compile": {
        "vLLM default": ({}, {"enforce_eager": False}),
        "no AOT": ({"VLLM_USE_AOT_COMPILE": "0"}, {"enforce_eager": False}),
        "eager": ({}, EAGER),
    },
}
RESULT = {"start": "server_start_eager", "compile": "server_start"}
TWO = {"fork": "two at once", "launcher": "two at once, launcher"}
"""The modes also started two at once, and the name of each pair."""
FIRST = "launcher, first start"


def start(mode: tuple[dict, dict], log: Path, launcher: str | None = None) -> tuple[VLLMServer, float]:
    """A server of `mode` (environment, `ServerConfig` fields) and the seconds it took to be healthy; a mode
    that names `LAUNCHER_ENV` starts through the launcher listening on `launcher`."""
    env, config = mode
    env = {key: launcher if key == LAUNCHER_ENV else value for key, value in env.items()}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        server = VLLMServer(MODEL, "m", log, ServerConfig(**config))
        started = time.monotonic()
        server.start()
        return server, time.monotonic() - started
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def decode(server: VLLMServer, requests: int, tokens: int) -> float:
    """Completion tokens per second over `requests` concurrent requests."""
    client = AsyncOpenAI(base_url=server.base_url, api_key=server.api_key)

    async def one(i: int) -> int:
        reply = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": f"Tell me fact number {i} about the sea."}],
            max_tokens=tokens,
            temperature=1.0,
            seed=i,
            extra_body={"ignore_eos": True, "min_tokens": tokens},
        )
        return reply.usage.completion_tokens

    started = time.monotonic()
    produced = sum(await asyncio.gather(*(one(i) for i in range(requests))))
    await client.close()
    return produced / (time.monotonic() - started)


def two_at_once(mode: tuple[dict, dict], logs: Path, launcher: str | None) -> float:
    """Seconds until two servers started at the same moment are both healthy."""
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        servers = list(pool.map(lambda i: start(mode, logs / f"two-{i}.log", launcher)[0], range(2)))
    seconds = time.monotonic() - started
    for server in servers:
        server.stop()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="start", help="which modes to compare (see above)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    modes = SETS[args.set]
    baseline = next(iter(modes))
    started_all = time.monotonic()
    starts: dict[str, list[float]] = {mode: [] for mode in modes}
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    launcher = None
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        try:
            for mode in modes:  # fills each mode's caches
                if LAUNCHER_ENV in modes[mode][0]:
                    started = time.monotonic()
                    launcher = start_launcher()
                    os.environ.pop(LAUNCHER_ENV)  # only the launcher mode starts through it
                    server, _ = start(modes[mode], logs / "warm.log", launcher.socket_path)
                    starts[FIRST] = [time.monotonic() - started]
                    seconds = starts[FIRST][0]
                else:
                    server, seconds = start(modes[mode], logs / "warm.log")
                server.stop()
                print(f"warm-up start, {mode}: {seconds:.0f} s", flush=True)
            socket_path = launcher.socket_path if launcher else None
            for i, mode in enumerate(rotations(list(modes), args.reps)):
                server, seconds = start(modes[mode], logs / f"{i}.log", socket_path)
                try:
                    rate = asyncio.run(decode(server, args.requests, args.tokens))
                finally:
                    server.stop()
                starts[mode].append(seconds)
                rates[mode].append(rate)
                print(
                    f"rep {i // len(modes) + 1}, {mode}: start {seconds:.1f} s, decode {rate:.0f} tokens/s", flush=True
                )
            for mode, pair in TWO.items() if args.set == "start" else ():
                starts[pair] = []
                for rep in range(args.reps):
                    starts[pair].append(two_at_once(modes[mode], logs, socket_path))
                    print(f"rep {rep + 1}, {pair}: both up in {starts[pair][-1]:.1f} s", flush=True)
        finally:
            if launcher:
                launcher.stop()
    start_s = {mode: summary(samples) for mode, samples in starts.items()}
    rate = {mode: summary(samples) for mode, samples in rates.items()}
    conditions = f"embedded model, merged serving, {args.requests} x {args.tokens} tokens, {args.reps} reps"
    ratios = []
    for mode in list(modes)[1:]:
        ratios.append(ratio_entry(f"start-up, {mode}", start_s[mode]["median"], start_s[baseline]["median"],
                                  "s", None, False, conditions))  # fmt: skip
        ratios.append(ratio_entry(f"decode, {mode}", rate[mode]["median"], rate[baseline]["median"],
                                  "tokens/s", None, True, conditions))  # fmt: skip
    if FIRST in start_s:  # a launcher's first server: its own import and the server's start
        ratios.append(ratio_entry(FIRST, start_s[FIRST]["median"], start_s[baseline]["median"],
                                  "s", None, False, conditions))  # fmt: skip
    for mode, pair in TWO.items():  # two servers against one of the same mode
        if pair in start_s:
            ratios.append(ratio_entry(f"start-up, {pair} vs one", start_s[pair]["median"],
                                      start_s[mode]["median"], "s", None, False, conditions))  # fmt: skip
    print_table(ratios)
    result = {"set": args.set, "ratios": ratios, "start_s": start_s, "decode_tokens_s": rate}
    path = write_result(RESULT[args.set], result, started_all)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
