"""How cost grows: step time and memory over a run, against group size, completion length, concurrency, judging.

    python benchmarks/perf/scaling.py [--steps 40] [--step-tokens 64] [--sweep-steps 3] [--reps 3] [--parts PARTS]
                                      [--out NAME]

Each part measures one thing as it grows, on the embedded model (SmolLM2-135M-Instruct), this process and the
servers it starts alone on the machine:
- `judge`: one RULER request of the embedded judge (`judge_model="embedded"`, its shared vLLM server, the
  judge cache off) on groups of 4, 8 and 16 answers the base model wrote to one question, `--reps` times in
  rotated order: seconds, attempts and tokens per request; a group the judge's context cannot hold (RULER
  refuses it before asking) is recorded as refused, with RULER's reason. The embedded server is stopped after it.
- `concurrency`: rollout throughput of the policy's vLLM server (`LocalBackend`, merged serving: the CPU
  default, the base weights before any step) at 8, 32, 64 and 128 requests in flight, twice as many requests
  as in flight, exactly `--tokens` completion tokens each (`ignore_eos`), logprobs on as in training,
  `--reps` rounds in rotated order: completion tokens/s. The server runs at most `ServerConfig.max_num_seqs`
  (32 on CPU) at once; the rest queue.
- `steps`: `--steps` full GRPO steps of `perf_grpo_step.py`'s setup (G=8 rollouts of one prompt, exactly
  `--step-tokens` completion tokens (64), a cheap deterministic reward, `model.train()` with its checkpoint
  write and the merged weights served): per step the step time, the trainer's update, the resident memory of
  this process (the trainer) and of the server's processes, and this process's peak; written every
  `SAVE_EVERY` steps. Flat means the median of the last five steps within 10% of the median of steps 5-9.
- `group_size`, `length`: steps at group sizes 4, 8, 16 (64 tokens) and at completion lengths 64, 256, 1024
  (G=8; the update in micro-batches of `--length-micro-batch`, default 2: with the default 8, a step of 1024-token
  completions took the trainer past 20 GB), `--sweep-steps` of each, in rotated order, after `steps` on the
  same model: the step time's median.

Prints a table per part, writes `benchmarks/perf/results/scaling.json` and one PNG of the five curves,
`benchmarks/perf/results/scaling.png` (the README shows it), after each part (`"complete": false` until the last).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, Loop, rotations, summary, write_result
from perf_grpo_step import Ours, train_config
from perf_rollout import PROMPTS, vllm_tokens_per_s

import autorl as art
from autorl.serving.config import ServerConfig
from tests.helpers.processes import descendants, rss_mib

PARTS = ("judge", "concurrency", "steps", "group_size", "length")
JUDGE_GROUPS = (4, 8, 16)
CONCURRENCY = (8, 32, 64, 128)
GROUP_SIZES = (4, 8, 16)
LENGTHS = (64, 256, 1024)
SAVE_EVERY = 10
"""The `steps` part writes its steps so far every this many steps."""
FLAT = 0.10
"""The most the last steps' median may differ from that of steps 5-9 (step time, memory) to count as flat."""


class Side(Ours):
    """`perf_grpo_step`'s step of ours, with the update's micro-batch settable (`--length-micro-batch`)."""

    micro_batch_size = art.TrainConfig().micro_batch_size

    async def train(self, groups: list[art.TrajectoryGroup]) -> dict:
        return await self.model.train(groups, config=train_config(micro_batch_size=self.micro_batch_size))


async def judge_part(reps: int) -> dict[str, Any]:
    """One RULER request of the embedded judge per group size, `reps` times, the cache off."""
    from openai import AsyncOpenAI

    from autorl.serving.embedded import embedded_endpoint, stop_shared_servers
    from ruler import RulerJudge
    from ruler.errors import RulerInputError

    endpoint = await asyncio.to_thread(embedded_endpoint)
    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key.get_secret_value())
    question = PROMPTS[0]
    answers = await client.chat.completions.create(
        model=endpoint.model, messages=question, n=max(JUDGE_GROUPS), max_tokens=64, temperature=1.0, seed=0
    )
    lists = [[*question, {"role": "assistant", "content": c.message.content or ""}] for c in answers.choices]
    judge = RulerJudge("embedded", cache_dir=None)
    rows: dict[int, list[dict[str, float]]] = {size: [] for size in JUDGE_GROUPS}
    refused: dict[int, str] = {}
    try:
        for size in rotations(JUDGE_GROUPS, reps):
            if size in refused:
                continue
            started = time.perf_counter()
            try:
                scores = await judge.score_group(lists[:size], task="Answer the user's question in a few sentences.")
            except RulerInputError as exc:  # the group does not fit the judge's context: a finding, not a failure
                refused[size] = str(exc)
                print(f"judge, group of {size}: {exc}", flush=True)
                continue
            seconds = time.perf_counter() - started
            keys = ("ruler_attempts", "ruler_prompt_tokens", "ruler_completion_tokens", "ruler_shortened")
            totals = {key: sum(score.metrics.get(key, 0.0) for score in scores) for key in keys}
            rows[size].append({"seconds": seconds, "attempts": totals["ruler_attempts"] / size,
                               "prompt_tokens": totals["ruler_prompt_tokens"],
                               "completion_tokens": totals["ruler_completion_tokens"],
                               "shortened": totals["ruler_shortened"]})  # fmt: skip
            print(f"judge, group of {size}: {seconds:.1f}s", flush=True)
    finally:
        await client.close()
        stop_shared_servers()
    measured = {
        str(size): {key: summary([r[key] for r in runs]) for key in runs[0]} for size, runs in rows.items() if runs
    }
    return measured | {str(size): {"refused": why} for size, why in refused.items()}


async def concurrency_part(model: art.TrainableModel, tokens: int, reps: int) -> dict[str, Any]:
    client = model.openai_client()
    rates: dict[int, list[float]] = {c: [] for c in CONCURRENCY}
    for concurrency in rotations(CONCURRENCY, reps):
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(2 * concurrency)]
        rates[concurrency].append(
            await vllm_tokens_per_s(client, model.get_inference_name(), prompts, concurrency, tokens)
        )
        print(f"rollouts, {concurrency} in flight: {rates[concurrency][-1]:.0f} tok/s", flush=True)
    await client.close()
    return {str(c): summary(r) for c, r in rates.items()}


def one_step(loop: Loop, side: Side, group_size: int, tokens: int) -> dict[str, float]:
    """One GRPO step of `side` at `group_size` x `tokens`; its times and the memory after it."""
    side.group_size, side.tokens = group_size, tokens
    loop.run(side.step())
    step = dict(side.steps[-1])
    trainer_rss, trainer_peak = rss_mib(os.getpid())
    step |= {
        "trainer_rss_mib": trainer_rss,
        "trainer_peak_mib": trainer_peak,
        "server_rss_mib": sum(rss_mib(pid)[0] for pid in descendants(os.getpid())),
    }
    return step


def flatness(steps: list[dict[str, float]], key: str) -> dict[str, float] | None:
    """The median of `key` over the last five steps against steps 5-9 (1-based); None for under 14 steps."""
    if len(steps) < 14:
        return None
    early = statistics.median(s[key] for s in steps[4:9])
    late = statistics.median(s[key] for s in steps[-5:])
    return {"steps_5_9": round(early, 3), "last_5": round(late, 3), "ratio": round(late / early, 3),
            "flat": abs(late / early - 1) <= FLAT}  # fmt: skip


def sweep(loop: Loop, side: Side, values: tuple[int, ...], steps: int, size_of: Any) -> dict[str, Any]:
    """`steps` steps at each of `values` (rotated), `size_of(value)` = (group size, tokens): the step times."""
    times: dict[int, list[dict[str, float]]] = {v: [] for v in values}
    for value in rotations(values, steps):
        times[value].append(one_step(loop, side, *size_of(value)))
        print(f"  {value}: {times[value][-1]['total_s']:.1f}s", flush=True)
    keys = ("total_s", "rollouts_s", "train_and_serve_s", "trainer_update_s", "trained_tokens")
    return {str(v): {key: summary([s[key] for s in runs]) for key in keys} for v, runs in times.items()}


def policy_parts(
    loop: Loop, parts: list[str], args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]
) -> None:
    """The parts on the policy's server and trainer (all but `judge`), one model, into `result`; `save()`
    after each."""
    home = Path(tempfile.mkdtemp(prefix="autorl-perf-scaling-"))
    backend = art.LocalBackend(home, server=ServerConfig(lora_serving="merged"))
    model = art.TrainableModel(name="scaling", project="bench")
    try:
        loop.run(model.register(backend))
        if "concurrency" in parts:
            result["concurrency"] = loop.run(concurrency_part(model, args.tokens, args.reps))
            save()
        side = Side(model)
        if "steps" in parts:
            per_step = []
            for number in range(1, args.steps + 1):
                per_step.append({"step": number, **one_step(loop, side, 8, args.step_tokens)})
                s = per_step[-1]
                print(f"step {number}/{args.steps}: {s['total_s']:.1f}s, trainer {s['trainer_rss_mib']:.0f} MiB, "
                      f"server {s['server_rss_mib']:.0f} MiB", flush=True)  # fmt: skip
                result["steps"] = {
                    "per_step": [
                        {k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()} for s in per_step
                    ],
                    "flat": {key: flatness(per_step, key) for key in ("total_s", "trainer_rss_mib", "server_rss_mib")},
                }
                if number % SAVE_EVERY == 0 or number == args.steps:
                    save()  # a long run stopped early leaves its steps so far
        if "group_size" in parts:
            print("group size:", flush=True)
            result["group_size"] = sweep(loop, side, GROUP_SIZES, args.sweep_steps, lambda g: (g, 64))
            save()
        if "length" in parts:
            print(f"completion length (micro-batch {args.length_micro_batch}):", flush=True)
            side.micro_batch_size = args.length_micro_batch
            result["length"] = sweep(loop, side, LENGTHS, args.sweep_steps, lambda n: (8, n))
            save()
        loop.run(side.client.close())
    finally:
        backend.close()


def plot(result: dict[str, Any], path: Path) -> None:
    """The five curves in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 5, figsize=(22, 4))

    def curve(ax: Any, part: dict, key: str | None, xlabel: str, ylabel: str) -> None:
        kept = [x for x in part if "refused" not in part[x]]  # a judge group too large for its context
        xs = [int(x) for x in kept]
        values = [part[x] if key is None else part[x][key] for x in kept]
        ax.errorbar(xs, [v["median"] for v in values], marker="o", capsize=3,
                    yerr=[[v["median"] - v["min"] for v in values], [v["max"] - v["median"] for v in values]])  # fmt: skip
        ax.set(xscale="log", xticks=xs, xticklabels=[str(x) for x in xs], xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)

    if "steps" in result:
        steps = result["steps"]["per_step"]
        ax = axes[0]
        ax.plot([s["step"] for s in steps], [s["total_s"] for s in steps], marker=".", label="step time (s)")
        ax.set(xlabel="step", ylabel="seconds", title="GRPO step over a run (G=8, 64 tokens)")
        twin = ax.twinx()
        twin.plot([s["step"] for s in steps], [s["trainer_rss_mib"] for s in steps], color="C1", label="trainer RSS")
        twin.plot([s["step"] for s in steps], [s["server_rss_mib"] for s in steps], color="C2", label="server RSS")
        twin.set(ylabel="MiB")
        twin.legend(loc="lower right", fontsize=8)
    titled = [
        ("group_size", "total_s", "group size (64 tokens)", "step seconds", "step time vs group size"),
        ("length", "total_s", "completion tokens (G=8)", "step seconds", "step time vs completion length"),
        ("concurrency", None, "requests in flight", "completion tok/s", "rollout throughput"),
        ("judge", "seconds", "answers in the group", "seconds per request", "embedded RULER judge"),
    ]
    for ax, (part, key, xlabel, ylabel, title) in zip(axes[1:], titled, strict=True):
        if part in result:
            curve(ax, result[part], key, xlabel, ylabel)
        ax.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)  # pyplot keeps every figure it made: this process's RSS is the trainer's, measured per step


def print_part(name: str, part: dict[str, Any], key: str | None, unit: str) -> None:
    def cell(value: dict) -> str:
        if "refused" in value:
            return "does not fit the judge's context"
        figure = value if key is None else value[key]
        return f"{figure['median']:.1f} [{figure['min']:.1f}, {figure['max']:.1f}]"

    print(f"{name} ({unit}, median [min, max]): " + ", ".join(f"{x}: {cell(v)}" for x, v in part.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="GRPO steps of the `steps` part (at least 14)")
    parser.add_argument("--step-tokens", type=int, default=64, help="completion tokens per rollout of `steps`")
    parser.add_argument("--sweep-steps", type=int, default=3, help="steps per group size and per completion length")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each concurrency and judge group size")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens per request of `concurrency`")
    parser.add_argument(
        "--length-micro-batch",
        type=int,
        default=2,
        help="the update's micro-batch in the `length` part (at 1024 tokens the default 8 took the trainer past "
        "20 GB and was killed on a 23 GB machine)",
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}")
    parser.add_argument("--out", default="scaling", help="result name: writes benchmarks/perf/results/OUT.json/.png")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    if "steps" in parts and args.steps < 14:
        parser.error("--steps must be at least 14: flatness compares steps 5-9 with the last five")
    started = time.monotonic()
    result: dict[str, Any] = {"settings": vars(args) | {"max_num_seqs": ServerConfig().resolved_max_num_seqs()}}

    def save(complete: bool = False) -> Path:
        """The result so far, JSON and PNG: a part that runs out of memory (the kernel kills the process)
        leaves the parts before it."""
        path = write_result(args.out, result | {"complete": complete}, started)
        plot(result, RESULTS / f"{args.out}.png")
        return path

    loop = Loop()
    try:
        if "judge" in parts:
            result["judge"] = loop.run(judge_part(args.reps))
            save()
        if set(parts) - {"judge"}:
            policy_parts(loop, parts, args, result, save)
    finally:
        loop.close()
    print()
    for name, key, unit in (("judge", "seconds", "s/request"), ("concurrency", None, "tok/s"),
                            ("group_size", "total_s", "s/step"), ("length", "total_s", "s/step")):  # fmt: skip
        if name in result:
            print_part(name, result[name], key, unit)
    if "steps" in result:
        for key, figures in result["steps"]["flat"].items():
            print(f"over the run, {key}: {figures}")
    path = save(complete=True)
    print(f"wrote {path} and {RESULTS / f'{args.out}.png'} ({time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
