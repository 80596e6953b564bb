"""Rollout throughput: our inference path with the current LoRA against Hugging Face `generate`, like for like.

Setup (once): a `LocalBackend` with `ServerConfig(lora_serving="adapter")` serves the embedded model
(SmolLM2-135M-Instruct) with vLLM; one GRPO step on 8 rollouts (reward: share of the letter "e", a
cheap deterministic stand-in for a judge) writes checkpoint 0001, which the backend serves as the
LoRA `perf@0001`. A second vLLM server runs with `ServerConfig(lora_serving="merged")` (the CPU
default) and serves the same checkpoint merged into the base weights (`VLLMServer.load_merged`). The
baseline is `transformers` `generate` on the same checkpoint, batched, each way ours serves it:
unmerged (base weights + the LoRA via `PeftModel.from_pretrained`) and merged (`merge_and_unload`, the
merge done in float32 and the result cast, as `load_merged` writes it), each in every `--hf-dtypes`
dtype (bf16: the precision vLLM serves in on CPU; fp32: the weights as stored and as our trainer uses them).

Measured, interleaved, `--reps` times (order rotated each repetition), median reported:
    ours, adapter     : the OpenAI client of `model.openai_client()` requesting `perf@0001` (vLLM LoRA path)
    ours, merged      : an OpenAI client requesting the merged server's model (vLLM plain path)
    HF, adapter DTYPE : generate on the PEFT model, LoRA unmerged; batches of the concurrency's size
    HF, merged DTYPE  : generate on the merged model
at 8 and 32 concurrent requests (8: `--requests-8` prompts, 32: `--requests-32`), every prompt a
system prompt + a distinct user question, chat template applied by both sides; sampling at
temperature 1, top_p 1, top_k off, seeded; exactly `--tokens` completion tokens per request on both
sides (vLLM `ignore_eos`, HF `min_new_tokens`) so both do the same work. Our requests also ask for
logprobs, as training rollouts do; HF returns none. Tokens/s = completion tokens / wall time. Both
vLLM servers stay up (idle) while the others run; the CPU they take meanwhile is recorded.

Ratios compare like with like only: ours with the adapter against HF with the adapter, ours merged
against HF merged (each against the faster HF dtype, where the goal of >= 2.5x is checked, and against
each dtype); and ours merged against ours with the adapter.

Also measured: what loading a new checkpoint costs in each mode (LoRA load vs merge + reload), and
the rollout tokens per step above which merged serving pays for its reload.

    python benchmarks/perf/perf_rollout.py  # writes benchmarks/perf/results/rollout.json
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Loop, print_table, ratio_entry, summary, write_result

import autorl as art
from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer
from tests.helpers.processes import process_group_cpu_s

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SYSTEM = "You are a helpful assistant. Answer in a few sentences."
TOPICS = [
    "why the sky is blue", "how bread rises", "what a compiler does", "how tides work", "why cats purr",
    "how a bicycle stays upright", "what causes rain", "how vaccines work", "why leaves change colour",
    "how a battery stores energy", "what a black hole is", "how bees make honey", "why the sea is salty",
    "how a refrigerator works", "what inflation is", "how plants drink water", "why we dream",
    "how a rainbow forms", "what an atom is made of", "how a violin makes sound", "why ice floats",
    "how GPS finds a position", "what photosynthesis does", "how a lock and key work", "why volcanoes erupt",
    "how the heart pumps blood", "what a prime number is", "how a camera lens focuses", "why stars twinkle",
    "how a plane flies", "what a virus is", "how coffee is decaffeinated",
]  # fmt: skip
PROMPTS = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Explain {t}."}] for t in TOPICS]


def e_share(text: str) -> float:
    """The training reward of the setup step: share of the letter 'e' (cheap, deterministic, varies)."""
    return text.count("e") / max(1, len(text))


async def train_one_step(model: art.TrainableModel) -> None:
    client = model.openai_client()

    async def rollout(i: int) -> art.Trajectory:
        messages = PROMPTS[0]
        response = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, max_tokens=32, temperature=1.0, seed=i, logprobs=True
        )
        choice = response.choices[0]
        return art.Trajectory(messages_and_choices=[*messages, choice], reward=e_share(choice.message.content or ""))

    groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(i) for i in range(8))], pbar_desc=None)
    await model.train(groups, config=art.TrainConfig(learning_rate=1e-4))


async def vllm_tokens_per_s(client: AsyncOpenAI, name: str, prompts: list, concurrency: int, tokens: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> int:
        async with gate:
            response = await client.chat.completions.create(
                model=name,
                messages=prompts[i],
                max_tokens=tokens,
                temperature=1.0,
                top_p=1.0,
                seed=i,
                logprobs=True,
                extra_body={"ignore_eos": True, "top_k": -1},
            )
            return response.usage.completion_tokens

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(len(prompts))))
    return sum(counts) / (time.perf_counter() - started)


def hf_tokens_per_s(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list, batch: int, tokens: int, seed: int
) -> float:
    import torch

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    generated = 0
    torch.manual_seed(seed)
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        encoded = tokenizer(texts[start : start + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(
                **encoded,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                pad_token_id=tokenizer.pad_token_id,
            )
        generated += (out.shape[1] - encoded["input_ids"].shape[1]) * out.shape[0]
    return generated / (time.perf_counter() - started)


DTYPE_LABELS = {"bfloat16": "bf16", "float32": "fp32"}


def hf_model(model_dir: Path, checkpoint: Path, *, merged: bool, dtype: str) -> PreTrainedModel:
    """The HF baseline's model: the base weights with the checkpoint's LoRA, unmerged (a PEFT model, its LoRA
    in float32 as PEFT keeps it) or merged (merged in float32, then cast to `dtype`, as `load_merged` does)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32 if merged else getattr(torch, dtype))
    model = PeftModel.from_pretrained(base, checkpoint)
    if merged:
        model = model.merge_and_unload().to(getattr(torch, dtype))
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each interleaved measurement")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens per request")
    parser.add_argument("--requests-8", type=int, default=8, help="requests measured at concurrency 8")
    parser.add_argument("--requests-32", type=int, default=32, help="requests measured at concurrency 32")
    parser.add_argument(
        "--hf-dtypes",
        type=lambda text: [d.strip() for d in text.split(",")],
        default=["bfloat16", "float32"],
        help="dtypes of the HF baselines, comma-separated (bfloat16, float32)",
    )
    args = parser.parse_args()
    if unknown := set(args.hf_dtypes) - DTYPE_LABELS.keys():
        parser.error(f"--hf-dtypes: unknown {', '.join(sorted(unknown))}; choose from {', '.join(DTYPE_LABELS)}")
    started = time.monotonic()

    import torch
    from openai import AsyncOpenAI
    from transformers import AutoTokenizer

    model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
    home = Path(tempfile.mkdtemp(prefix="autorl-perf-rollout-"))
    loop = Loop()
    backend = art.LocalBackend(home, server=ServerConfig(lora_serving="adapter"))
    model = art.TrainableModel(name="perf", project="bench", base_model=DEFAULT_BASE_MODEL)
    merged = VLLMServer(model_dir, "perf-merged", home / "merged-vllm.log", ServerConfig(lora_serving="merged"))
    setup: dict[str, float] = {}
    clients = []
    try:
        t = time.monotonic()

        # both servers start at once; from the loop's executor, whose threads live as long as the servers
        # (a server is SIGTERMed when the thread that started it exits: PR_SET_PDEATHSIG is per thread)
        async def start_both() -> None:
            await asyncio.gather(model.register(backend), asyncio.to_thread(merged.start))

        loop.run(start_both())
        setup["servers_start_s"] = time.monotonic() - t

        t = time.monotonic()
        loop.run(train_one_step(model))
        setup["train_step_s"] = time.monotonic() - t
        checkpoint = backend.run_dir(model) / "checkpoints" / "0001"
        lora_name = model.get_inference_name()
        server = backend.serving(model).server

        t = time.monotonic()  # what a new checkpoint costs to serve, each way (same checkpoint, a second name)
        server.load_lora("perf@reload-probe", checkpoint)
        setup["lora_load_s"] = time.monotonic() - t
        server.unload_lora("perf@reload-probe")
        reloads = []
        for _ in range(2):
            t = time.monotonic()
            merged.load_merged(checkpoint)
            reloads.append(time.monotonic() - t)
        setup["merge_and_reload_s"] = statistics.median(reloads)

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        tokenizer.padding_side = "left"
        hf = {
            (way, dtype): hf_model(model_dir, checkpoint, merged=way == "merged", dtype=dtype)
            for way in ("adapter", "merged")
            for dtype in args.hf_dtypes
        }
        ours = model.openai_client()
        merged_client = AsyncOpenAI(base_url=merged.base_url, api_key=merged.api_key)
        clients += [ours, merged_client]
        server_groups = [server._process.pid, merged._process.pid]

        runners = {
            "ours_adapter": lambda prompts, c, n=args.tokens: loop.run(
                vllm_tokens_per_s(ours, lora_name, prompts, c, n)
            ),
            "ours_merged": lambda prompts, c, n=args.tokens: loop.run(
                vllm_tokens_per_s(merged_client, merged.served_name, prompts, c, n)
            ),
            **{
                f"hf_{way}_{DTYPE_LABELS[dtype]}": lambda prompts, c, n=args.tokens, m=hf[way, dtype]: hf_tokens_per_s(
                    m, tokenizer, prompts, c, n, seed=0
                )
                for way, dtype in hf
            },
        }
        for run in runners.values():  # warm-up: first calls pay one-time costs (HF's is large)
            run(PROMPTS[:8], 8, 8)

        results: dict[str, dict[int, list[float]]] = {name: {8: [], 32: []} for name in runners}
        idle_server_cpu: list[float] = []
        order = list(runners)
        for rep in range(args.reps):
            for concurrency, count in ((8, args.requests_8), (32, args.requests_32)):
                prompts = PROMPTS[:count]
                for name in order[rep % len(order) :] + order[: rep % len(order)]:
                    cpu_before = sum(process_group_cpu_s(g) for g in server_groups)
                    t = time.monotonic()
                    results[name][concurrency].append(runners[name](prompts, concurrency))
                    if name.startswith("hf_"):  # how much the two idle servers took from HF's cores
                        cpu = sum(process_group_cpu_s(g) for g in server_groups) - cpu_before
                        idle_server_cpu.append(cpu / (time.monotonic() - t))
                    print(f"rep {rep + 1}/{args.reps} c={concurrency:2d} {name:16s} "
                          f"{results[name][concurrency][-1]:7.1f} tok/s", flush=True)  # fmt: skip
    finally:
        for client in clients:
            loop.run(client.close())
        backend.close()
        merged.stop()
        loop.close()

    med = {name: {c: statistics.median(v) for c, v in per.items()} for name, per in results.items()}
    conditions = (
        f"{{c}} concurrent requests, {args.tokens} completion tokens each, SmolLM2-135M + trained LoRA r8, "
        f"temperature 1, median of {args.reps}; vLLM bf16 (its CPU default), model "
        f"{'in the engine process (cpu_in_process)' if server._in_process() else 'in a worker process'}, "
        f"HF on {torch.get_num_threads()} threads"
    )
    ratios = []
    labels = {"adapter": "LoRA request (adapter)", "merged": "merged LoRA"}
    for c in (8, 32):
        for way, label in labels.items():  # like for like: ours and HF serve the checkpoint the same way
            hf_rates = {DTYPE_LABELS[d]: med[f"hf_{way}_{DTYPE_LABELS[d]}"][c] for d in args.hf_dtypes}
            best = max(hf_rates, key=hf_rates.__getitem__)
            ratios.append(ratio_entry(f"rollout c={c}, {label} vs HF generate {way} (best: {best})",
                                      med[f"ours_{way}"][c], hf_rates[best], "tok/s", 2.5, True,
                                      conditions.format(c=c)))  # fmt: skip
            for dtype, rate in hf_rates.items():
                ratios.append(ratio_entry(f"rollout c={c}, {label} vs HF generate {way} {dtype}",
                                          med[f"ours_{way}"][c], rate, "tok/s", None, True,
                                          conditions.format(c=c)))  # fmt: skip
    for c in (8, 32):
        ratios.append(ratio_entry(f"rollout c={c}, merged vs LoRA request",
                                  med["ours_merged"][c], med["ours_adapter"][c], "tok/s", None, True,
                                  conditions.format(c=c)))  # fmt: skip

    extra_s = setup["merge_and_reload_s"] - setup["lora_load_s"]
    break_even = {
        c: extra_s / (1 / med["ours_adapter"][c] - 1 / med["ours_merged"][c])
        if med["ours_merged"][c] > med["ours_adapter"][c]
        else None
        for c in (8, 32)
    }
    result = {
        "benchmark": "rollout throughput: our vLLM path with the current LoRA vs HF generate on the same checkpoint, "
        "each served the same way (adapter vs unmerged PEFT, merged vs merged)",
        "settings": vars(args),
        "tokens_per_s": {name: {str(c): summary(v) for c, v in per.items()} for name, per in results.items()},
        "setup_s": {k: round(v, 2) for k, v in setup.items()},
        "merged_break_even_rollout_tokens_per_step": {
            str(c): (round(v) if v is not None else None) for c, v in break_even.items()
        },
        "idle_servers_cpu_share_during_hf": summary(idle_server_cpu) if idle_server_cpu else None,
        "ratios": ratios,
    }
    path = write_result("rollout", result, started)
    print()
    print_table(ratios)
    print(
        f"\nnew checkpoint: LoRA load {setup['lora_load_s']:.2f}s, merge + reload {setup['merge_and_reload_s']:.2f}s; "
        f"merged serving pays off above ~{break_even[32] or float('nan'):.0f} rollout tokens per step at c=32 "
        f"(~{break_even[8] or float('nan'):.0f} at c=8)"
    )
    print(f"wrote {path} ({time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
