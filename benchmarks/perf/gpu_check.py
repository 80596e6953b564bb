"""The GPU path on a real GPU: vLLM on CUDA, GRPO steps with each trainer engine, unsloth vs peft, and the
paths a first CUDA run takes besides plain steps (issue 76, docs/gpu.md).

    python benchmarks/perf/gpu_check.py [--steps 3] [--home DIR]

Per engine (each in its own process: importing Unsloth patches transformers for the whole process, and the
process imports it first as `autorl run` does, `autorl.training.engines.prepare_engine`), on a copy of the
embedded model behind vLLM on CUDA with adapter serving (a copy: the policy is then not the embedded model, so
the embedded judge's own server starts beside it on the same GPU), the learning benchmark's `one_word` task (a
programmatic judge) and its training inputs: `--steps` steps of 2 groups x 8 rollouts. Then, each recorded as
passed or with its error under `checks`:

- two servers on one GPU: the embedded judge's server answers a request beside the policy's (`gpu_shares`);
- a sequence past 2048 tokens: a step on a group whose prompts are longer than Unsloth's default
  max_seq_length (the servers run with max_model_len 4096);
- rollback: back to checkpoint 1, then a step from it (step 2 again);
- resume: the backend closed, a new one on the same directory, a step from the newest checkpoint (the
  trainer loads the LoRA from its files: Unsloth's `patch_peft_model` path).

Prints per engine the median step time split into rollouts, judge, train (the optimizer step) and LoRA load (save
+ serve), the trainer's peak GPU memory and the GPU's peak use (nvidia-smi, vLLM included), rollout
tokens/s, the sampler logprob gap, and the ratio unsloth / peft of the train time; writes
`benchmarks/perf/results/gpu_check.json`. Needs a CUDA GPU and `./install.sh --gpu`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import LEARNING_TASKS, summary, write_result

ENGINES = ("unsloth", "peft")
GROUP_SIZE, GROUPS_PER_STEP, MAX_TOKENS = 8, 2, 128
LONG_MODEL_LEN = 4096
"""The servers' max_model_len: room for the check's sequence past Unsloth's default 2048."""


def gpu_used_mib() -> int:
    """Memory in use on GPU 0, every process included (nvidia-smi)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(out.stdout.split()[0])


def one_engine(engine: str, steps: int, home: Path) -> dict:
    """Run `steps` GRPO steps with `engine` in this process; its figures."""
    from autorl.training.engines import prepare_engine

    prepare_engine(engine)  # first, as `autorl run` does: Unsloth patches transformers and peft
    import shutil

    import torch

    import autorl as art
    from autorl.agents.rollout import RolloutConfig, agent_rollout, openai_completion
    from autorl.inputs.files import read_inputs_jsonl
    from autorl.serving.config import ServerConfig
    from autorl.serving.embedded import DEFAULT_BASE_MODEL, embedded_endpoint, resolve_base_model
    from benchmarks.perf.learning_tasks import judges

    rows = read_inputs_jsonl(LEARNING_TASKS / "inputs.jsonl")
    inputs = [row.input for row in rows if row.split == "train"]
    system = "Answer the user's question with exactly one word and nothing else."
    peak = {"gpu_mib": 0}
    sampling = threading.Event()

    def watch() -> None:
        while not sampling.wait(0.5):
            peak["gpu_mib"] = max(peak["gpu_mib"], gpu_used_mib())

    policy_dir = home / f"policy-{engine}"  # the embedded model's weights under another path: not "embedded"
    if not policy_dir.is_dir():
        shutil.copytree(resolve_base_model(DEFAULT_BASE_MODEL), policy_dir)
    server = ServerConfig(max_model_len=LONG_MODEL_LEN)

    def new_model() -> art.TrainableModel:
        trainer = art.TrainerConfig(engine=engine)
        return art.TrainableModel(name="gpu-check", project=engine, base_model=str(policy_dir), trainer=trainer)

    async def groups_of(model: art.TrainableModel, texts: list[str], prompt: str) -> list[art.TrajectoryGroup]:
        config = RolloutConfig(max_tokens=MAX_TOKENS)
        complete = openai_completion(model.openai_client(), model.get_inference_name(), config)
        groups = [art.TrajectoryGroup(agent_rollout(complete, prompt, t) for _ in range(GROUP_SIZE)) for t in texts]
        groups = await art.gather_trajectory_groups(groups, pbar_desc=None)
        for group in groups:
            for trajectory in group.trajectories:
                trajectory.reward = judges.one_word(trajectory.messages())
        return groups

    async def check(name: str, body: Any) -> None:
        try:
            checks[name] = {"ok": True, **(await body())}
        except Exception as exc:  # a check that fails is recorded, and the others still run
            checks[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        print(f"{engine} check {name}: {checks[name]}", flush=True)

    checks: dict[str, dict] = {}

    async def run() -> list[dict]:
        backend = art.LocalBackend(home / engine, server=server)
        model = new_model()
        await model.register(backend)
        records = []
        try:
            for step in range(steps):
                started = time.monotonic()
                texts = [inputs[(step * GROUPS_PER_STEP + i) % len(inputs)] for i in range(GROUPS_PER_STEP)]
                groups = await groups_of(model, texts, system)
                rollouts_s = time.monotonic() - started
                judge_s = 0.0  # a program judge, scored with the rollouts
                started = time.monotonic()
                metrics = await model.train(groups, config=art.TrainConfig())
                train_call_s = time.monotonic() - started
                tokens = sum(t.metrics["completion_tokens"] for g in groups for t in g.trajectories)
                records.append({
                    "rollouts_s": rollouts_s, "judge_s": judge_s, "train_s": metrics["step_time_s"],
                    "lora_load_s": train_call_s - metrics["step_time_s"], "tokens_per_s": tokens / rollouts_s,
                    "sampler_logprob_gap": metrics.get("sampler_logprob_gap", float("nan")), "reward": metrics["reward"],
                })  # fmt: skip
                print(
                    f"{engine} step {step + 1}: " + ", ".join(f"{k} {v:.3g}" for k, v in records[-1].items()),
                    flush=True,
                )
            await run_checks(backend, model)
        finally:
            backend.close()
        return records

    async def run_checks(backend: art.LocalBackend, model: art.TrainableModel) -> None:
        async def two_servers() -> dict:
            endpoint = embedded_endpoint()  # the embedded judge's own server, beside the policy's
            from openai import AsyncOpenAI

            client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
            answer = await client.chat.completions.create(
                model=endpoint.model, messages=[{"role": "user", "content": "Say yes."}], max_tokens=8
            )
            return {"judge_answer": answer.choices[0].message.content, "gpu_used_mib": gpu_used_mib()}

        async def long_sequence() -> dict:
            long_prompt = system + " " + " ".join(["Answer in one word."] * 450)  # ~2,300 tokens
            groups = await groups_of(model, inputs[:1], long_prompt)
            longest = max(t.metrics.get("prompt_tokens", 0) for g in groups for t in g.trajectories)
            if longest <= 2048:
                raise AssertionError(f"the long prompt came to {longest} tokens, not past 2048")
            metrics = await model.train(groups, config=art.TrainConfig())
            return {"prompt_tokens": longest, "gap": metrics.get("sampler_logprob_gap"), "step": await model.get_step()}

        async def rollback() -> dict:
            await backend.rollback(model, 1)
            groups = await groups_of(model, inputs[:GROUPS_PER_STEP], system)
            await model.train(groups, config=art.TrainConfig())
            return {"step_after": await model.get_step()}

        async def resume() -> dict:
            step = await model.get_step()
            backend.close()
            again = art.LocalBackend(home / engine, server=server)
            resumed = new_model()
            await resumed.register(again)
            try:
                groups = await groups_of(resumed, inputs[:GROUPS_PER_STEP], system)
                metrics = await resumed.train(groups, config=art.TrainConfig())
                return {"from": step, "to": await resumed.get_step(), "gap": metrics.get("sampler_logprob_gap")}
            finally:
                again.close()

        await check("two_servers_one_gpu", two_servers)
        await check("sequence_past_2048", long_sequence)
        await check("rollback", rollback)
        await check("resume", resume)

    threading.Thread(target=watch, daemon=True).start()
    try:
        records = asyncio.run(run())
    finally:
        sampling.set()
    later = records[1:] or records  # the first step also loads the trainer
    return {
        "engine": engine,
        **{key: summary([r[key] for r in later]) for key in records[0]},
        "first_step_s": round(sum(records[0][k] for k in ("rollouts_s", "judge_s", "train_s", "lora_load_s")), 2),
        "trainer_peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20),
        "gpu_peak_used_mib": peak["gpu_mib"],
        "checks": checks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per engine.")
    parser.add_argument("--home", type=Path, help="Where runs are written (default: a temporary directory).")
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)  # one engine, in a child process
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="autorl-gpu-check-"))
    if args.engine:
        print("RESULT " + json.dumps(one_engine(args.engine, args.steps, home)), flush=True)
        return
    started = time.monotonic()
    results = {}
    for engine in ENGINES:
        child = subprocess.run(
            [sys.executable, __file__, "--engine", engine, "--steps", str(args.steps), "--home", str(home)],
            capture_output=True, text=True,
        )  # fmt: skip
        print(child.stdout[-4000:], child.stderr[-2000:] if child.returncode else "", sep="\n")
        line = next((x for x in child.stdout.splitlines() if x.startswith("RESULT ")), None)
        results[engine] = json.loads(line.removeprefix("RESULT ")) if line else {"error": child.stderr[-2000:]}
    ok = all("error" not in r and all(c["ok"] for c in r["checks"].values()) for r in results.values())
    if ok:
        for engine, r in results.items():
            print(f"{engine}: step {statistics.fsum(r[k]['median'] for k in ('rollouts_s', 'judge_s', 'train_s', 'lora_load_s')):.2f} s "
                  f"(rollouts {r['rollouts_s']['median']:.2f}, judge {r['judge_s']['median']:.3f}, train {r['train_s']['median']:.2f}, "
                  f"LoRA load {r['lora_load_s']['median']:.2f}); trainer peak {r['trainer_peak_gpu_mib']} MiB, GPU peak "
                  f"{r['gpu_peak_used_mib']} MiB; {r['tokens_per_s']['median']:.0f} tokens/s; gap {r['sampler_logprob_gap']['median']:.3f}")  # fmt: skip
        ratio = results["peft"]["train_s"]["median"] / results["unsloth"]["train_s"]["median"]
        results["train_speedup_unsloth_over_peft"] = round(ratio, 3)
        print(f"train step: unsloth {ratio:.2f}x faster than peft (peft time / unsloth time)")
    path = write_result("gpu_check", {"steps": args.steps, "results": results}, started)
    print(f"wrote {path}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
