"""Merged serving's weight update, in memory against through files: the time to serve a new LoRA checkpoint.

    python benchmarks/perf/perf_merged_reload.py [--reps 5]   # ~4 min on 2 cores; writes results/merged_reload.json

One vLLM server on the embedded model in merged serving (the CPU default) and two LoRA checkpoints of the
trainer's default shape (rank 8 on the seven projections, random A and B so that each changes the weights).
Each measured reload serves the other checkpoint than the one before (`VLLMServer.load_merged`), through one
of the two ways of `ServerConfig.merged_reload`, alternating in rotated order:
- "memory": the server's worker reads the checkpoint (the adapter) and merges and reloads it in memory;
- "files": this process merges it into its copy of the base weights, writes the merged model to /dev/shm and
  the server reads it back (the way before the worker extension).
Both include the pause, the prefix-cache reset and the resume. One warm-up reload each way first (each builds
its copy of the base weights). After every reload the greedy log-probabilities of a fixed prompt are read: both
ways must serve the same weights for the same checkpoint, else the run fails. Also recorded: the bytes each way
moves (the adapter file against the merged model) and this process's RSS after each way's last reload.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import print_table, ratio_entry, rotations, summary, write_result

from autorl.config import TrainerConfig
from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer
from tests.helpers.processes import rss_mib

WAYS = ("memory", "files")
PROMPT = [{"role": "user", "content": "Name three colours and a fruit."}]


def random_checkpoint(model_dir: Path, out: Path, seed: int) -> Path:
    """A LoRA of `TrainerConfig`'s default shape with random A and B (PEFT's B = 0 would change nothing)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    defaults = TrainerConfig()
    torch.manual_seed(seed)
    config = LoraConfig(
        r=defaults.lora_rank, lora_alpha=defaults.lora_alpha, target_modules=defaults.target_modules,
        init_lora_weights=False, task_type="CAUSAL_LM",
    )  # fmt: skip
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
    for name, parameter in model.named_parameters():
        if "lora_" in name:
            parameter.data.mul_(0.05)  # a step's size of change, not a new model
    model.save_pretrained(out)
    return out


def greedy_logprobs(server: VLLMServer) -> list[float]:
    import httpx

    body = {"model": server.served_name, "messages": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": True}
    reply = httpx.post(server.base_url + "/chat/completions", json=body, headers=server.headers, timeout=120)
    reply.raise_for_status()
    return [t["logprob"] for t in reply.json()["choices"][0]["logprobs"]["content"]]


def same(first: list[float], second: list[float]) -> bool:
    """Whether two reloads served the same weights: their greedy log-probabilities within 1e-5."""
    return max(abs(a - b) for a, b in zip(first, second, strict=True)) <= 1e-5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="measured reloads each way")
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="autorl-merged-reload-") as home:
        measure(Path(home), args.reps, began)


def measure(home: Path, reps: int, began: float) -> None:
    """Start the server in `home`, reload the two checkpoints each way, write the result."""
    model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
    checkpoints = [random_checkpoint(model_dir, home / f"lora{i}", seed=i) for i in range(2)]
    server = VLLMServer(model_dir, "perf", home / "vllm.log", ServerConfig(lora_serving="merged"))
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    served: dict[tuple[str, int], list[float]] = {}
    rss: dict[str, float] = {}
    try:
        server.start()
        plan = [(way, False) for way in WAYS] + [(way, True) for way in rotations(WAYS, reps)]
        for index, (way, measured) in enumerate(plan):
            server.config = server.config.model_copy(update={"merged_reload": way})
            checkpoint = index % 2
            started = time.perf_counter()
            server.load_merged(checkpoints[checkpoint])
            seconds = time.perf_counter() - started
            if not server.reloads_in_memory() and way == "memory":
                raise SystemExit(f"the in-memory reload failed; see {server.log_path}")
            logprobs = greedy_logprobs(server)
            expected = served.setdefault((way, checkpoint), logprobs)
            other = served.get(("files" if way == "memory" else "memory", checkpoint))
            if other is not None and not same(other, logprobs):
                raise SystemExit(f"checkpoint {checkpoint}: memory and files serve different weights")
            if not same(expected, logprobs):
                raise SystemExit(f"checkpoint {checkpoint} served differently on its second {way} reload")
            if measured:
                times[way].append(seconds)
            rss[way] = rss_mib(os.getpid())[0]
            print(f"{way}{'' if measured else ' (warm-up)'}: {seconds:.3f} s", flush=True)
        if served[("memory", 0)] == served[("memory", 1)]:
            raise SystemExit("the two checkpoints serve the same weights: the reload changed nothing")
        merged_mib = server._merger.nbytes / 2**20  # what each file reload wrote and the server read back
    finally:
        server.stop()
    adapter_mib = (checkpoints[0] / "adapter_model.safetensors").stat().st_size / 2**20
    results = {way: summary(times[way]) for way in WAYS}
    conditions = f"{os.cpu_count()} cores, the embedded model, {reps} reloads each way, rotated"
    rows = [
        ratio_entry("merged checkpoint reload, memory vs files", results["memory"]["median"],
                    results["files"]["median"], "s", None, False, conditions),
    ]  # fmt: skip
    print_table(rows)
    for round_ in range(reps):  # each rotation's pair: rounds that disagree are seen
        pair = {way: times[way][round_] for way in WAYS}
        print(f"round {round_ + 1}: memory {pair['memory']:.3f} s, files {pair['files']:.3f} s")
    path = write_result(
        "merged_reload",
        {"results": results, "ratios": rows, "bytes_read_mib": {"memory": round(adapter_mib, 1),
         "files": round(merged_mib, 1)}, "client_rss_mib_after": rss},
        began,
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
