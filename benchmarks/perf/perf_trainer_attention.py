"""The trainer's update on CPU with transformers' eager attention against the model's own (SDPA), by width.

    python benchmarks/perf/perf_trainer_attention.py [--lengths 32,64,128,256] [--reps 5]
    # writes benchmarks/perf/results/trainer_attention.json

What `TrainerConfig.eager_attention_max_tokens` rests on. For each completion length, one group of
`perf_grpo_step`'s G=8 sequences (its chat prompt, then that many sampled tokens of plain English, old
logprobs unknown so every ratio is 1) goes through `GRPOTrainer.step` (the sentinel's base pass, the
update) with the defaults (`TrainConfig()`: one micro-batch of 8, prompt sharing, dtype auto) and
attention either the model's own (`eager_attention_max_tokens=0`) or eager for every width. One trainer per
setting, the same seed; a warm-up step each, then `--reps` steps each in rotated order. Reported per
length: the micro-batch's width in tokens, the median and [min, max] step time of each setting, the
speed-up with eager attention (SDPA's time / eager's: above 1, eager is faster), and each setting's peak
resident memory during its steps (the process's high-water mark, reset before every step; both trainers'
weights are in it).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, ratio_entry, rotations, summary, write_result
from perf_grpo_step import GROUP_SIZE, PROMPT, train_config

import autorl as art
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.training.sequences import TOKEN_ID_PREFIX
from autorl.training.trainer import GRPOTrainer, release_freed_memory
from tests.helpers.processes import rss_mib

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SETTINGS = {"model's own (SDPA)": 0, "eager": 10**9}
"""Setting name -> `TrainerConfig.eager_attention_max_tokens`."""
WORDS = (
    "yes you can return them within thirty days please bring the receipt and the original box and we will "
    "refund the full price to your card thank you for shopping with us and have a lovely day"
)


def group(tokenizer: PreTrainedTokenizerBase, tokens: int, seed: int) -> art.TrajectoryGroup:
    """G trajectories: the prompt, then `tokens` sampled tokens (as our vLLM server returns them), rewards 0..G-1."""
    from openai.types.chat.chat_completion import Choice

    rng = random.Random(seed)
    trajectories = []
    for i in range(GROUP_SIZE):
        text = " ".join(rng.choice(WORDS.split()) for _ in range(tokens * 2))
        ids = tokenizer.encode(text, add_special_tokens=False)[:tokens]
        content = [{"token": f"{TOKEN_ID_PREFIX}{t}", "logprob": float("nan"), "top_logprobs": []} for t in ids]
        reply = Choice.model_validate(
            {
                "index": 0,
                "finish_reason": "length",
                "message": {"role": "assistant", "content": tokenizer.decode(ids)},
                "logprobs": {"content": content},
            }
        )
        trajectories.append(art.Trajectory(messages_and_choices=[*PROMPT, reply], reward=float(i)))
    return art.TrajectoryGroup(trajectories)


def reset_peak_memory() -> None:
    """Reset this process's resident high-water mark (VmHWM) to its current resident size (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")


def measure(model_dir: Path, home: Path, tokens: int, reps: int) -> dict:
    trainers = {
        name: GRPOTrainer(model_dir, home / f"{tokens}-{i}", art.TrainerConfig(eager_attention_max_tokens=limit))
        for i, (name, limit) in enumerate(SETTINGS.items())
    }
    groups = [group(next(iter(trainers.values())).tokenizer, tokens, seed=tokens)]
    config = train_config()
    times: dict[str, list[float]] = {name: [] for name in trainers}
    peaks: dict[str, list[float]] = {name: [] for name in trainers}
    for trainer in trainers.values():  # warm-up
        trainer.step(groups, config)
    width = 0
    for name in rotations(list(trainers), reps):
        release_freed_memory()
        reset_peak_memory()
        metrics = trainers[name].step(groups, config)
        peaks[name].append(rss_mib(os.getpid())[1])
        times[name].append(metrics["step_time_s"])
        width = int(metrics["tokens"] / GROUP_SIZE)  # one group: every sequence is as long (prompt + tokens)
    own, eager = (statistics.median(times[name]) for name in SETTINGS)
    del trainers
    gc.collect()
    release_freed_memory()
    return {
        "completion_tokens": tokens,
        "width_tokens": width,
        "step_s": {name: summary(values) for name, values in times.items()},
        "peak_rss_mib": {name: summary(values) for name, values in peaks.items()},
        "ratio": ratio_entry(
            f"trainer step, {tokens} completion tokens ({width} wide), eager vs SDPA", eager, own, "s/step", None,
            False, f"G={GROUP_SIZE}, one micro-batch, median of {reps} steps each",
        ),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="32,64,128,256", help="completion lengths in tokens, comma-separated")
    parser.add_argument("--reps", type=int, default=5, help="measured steps per setting and length")
    args = parser.parse_args()
    started = time.monotonic()
    import torch

    model_dir = Path(resolve_base_model(DEFAULT_BASE_MODEL))
    lengths = [int(n) for n in args.lengths.split(",")]
    parts = []
    with tempfile.TemporaryDirectory(prefix="autorl-attention-") as home:
        for tokens in lengths:
            parts.append(measure(model_dir, Path(home), tokens, args.reps))
            print(f"{tokens} completion tokens: {parts[-1]['ratio']['ratio']:.2f}x with eager attention", flush=True)
    print_table([p["ratio"] for p in parts])
    for p in parts:
        peaks = ", ".join(f"{name} {p['peak_rss_mib'][name]['median']:.0f}" for name in SETTINGS)
        print(f"peak RSS MiB at {p['completion_tokens']} completion tokens: {peaks}")
    settings = {
        "lengths": lengths,
        "reps": args.reps,
        "group_size": GROUP_SIZE,
        "train_config": "TrainConfig() defaults (micro-batch 8: one micro-batch), TrainerConfig() but the attention",
        "torch_threads": torch.get_num_threads(),
    }
    path = write_result("trainer_attention", {"benchmark": __doc__.splitlines()[0], "settings": settings,
                                              "lengths": parts}, started)  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
