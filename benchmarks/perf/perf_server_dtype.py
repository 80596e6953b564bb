"""Rollout throughput of the policy's vLLM server on this CPU in bfloat16 against float32.

vLLM's `--dtype auto` takes the model's own dtype (SmolLM2: bfloat16). A CPU without native bf16 matmuls
(no `avx512_bf16` or `amx_bf16`: AVX2-only machines, most laptops) runs those in software; float32 runs on its
native kernels. This measures which is faster here, as the default `ServerConfig(dtype="auto")` must choose:

    python benchmarks/perf/perf_server_dtype.py [--rounds 2] [--tokens 64]
    # writes benchmarks/perf/results/server_dtype.json

Each round starts one server per dtype (`LocalBackend`, merged serving as on CPU, the base weights), in rotated
order, one at a time (the other stopped), warms it with one request, then measures completion tokens/s at 8 and
32 requests in flight (one request per slot, exactly `--tokens` tokens each with `ignore_eos`, logprobs on as in
training; `perf_rollout.vllm_tokens_per_s`). Ratio: float32 over bfloat16, per round and the median over rounds.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Loop, machine, print_table, ratio_entry, rotations, summary, write_result
from perf_rollout import PROMPTS, vllm_tokens_per_s

import autorl as art
from autorl.serving.config import ServerConfig

DTYPES = ("bfloat16", "float32")
CONCURRENCY = (8, 32)


def measure(loop: Loop, dtype: str, tokens: int) -> dict[str, float]:
    """Start a server in `dtype`, warm it, and return tokens/s at each concurrency (and its start time)."""
    home = Path(tempfile.mkdtemp(prefix=f"autorl-perf-dtype-{dtype}-"))
    backend = art.LocalBackend(home, server=ServerConfig(dtype=dtype))
    model = art.TrainableModel(name="dtype", project="bench")
    try:
        started = time.monotonic()
        loop.run(model.register(backend))
        rates: dict[str, float] = {"start_s": time.monotonic() - started}
        client = model.openai_client()
        name = model.get_inference_name()
        loop.run(vllm_tokens_per_s(client, name, PROMPTS[:1], 1, 8))  # warm-up
        for concurrency in CONCURRENCY:
            prompts = [PROMPTS[i % len(PROMPTS)] for i in range(concurrency)]
            rates[str(concurrency)] = loop.run(vllm_tokens_per_s(client, name, prompts, concurrency, tokens))
            print(f"{dtype}: {concurrency} in flight {rates[str(concurrency)]:.1f} tok/s", flush=True)
        loop.run(client.close())
        return rates
    finally:
        backend.close()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="server starts per dtype, in rotated order")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens per request")
    parser.add_argument("--out", default="server_dtype", help="the results file's name, without .json")
    args = parser.parse_args()
    began = time.monotonic()
    loop = Loop()
    runs: dict[str, list[dict[str, float]]] = {d: [] for d in DTYPES}
    for dtype in rotations(DTYPES, args.rounds):
        runs[dtype].append(measure(loop, dtype, args.tokens))
    flags = machine()["cpu_flags"]
    rows, per_round = [], {}
    for concurrency in map(str, CONCURRENCY):
        fp32 = [r[concurrency] for r in runs["float32"]]
        bf16 = [r[concurrency] for r in runs["bfloat16"]]
        per_round[concurrency] = [round(f / b, 3) for f, b in zip(fp32, bf16, strict=True)]
        rows.append(
            ratio_entry(
                f"rollouts at {concurrency} in flight, float32 vs bfloat16",
                statistics.median(fp32),
                statistics.median(bf16),
                "completion tok/s",
                None,
                True,
                f"{args.tokens} tokens per request, logprobs on, merged serving, medians of {args.rounds} server starts",
            )
        )
    print_table(rows)
    print("per round (float32 / bfloat16):", per_round)
    result = {
        "rows": rows,
        "per_round_ratio": per_round,
        "runs": {d: {key: summary([r[key] for r in rs]) for key in rs[0]} for d, rs in runs.items()},
        "native_bf16": any(flags.get(f) for f in ("avx512_bf16", "amx_bf16")),
    }
    print(write_result(args.out, result, began))


if __name__ == "__main__":
    main()
