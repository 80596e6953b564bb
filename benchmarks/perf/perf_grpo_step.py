"""One full GRPO step (G=8 rollouts, judge, train) of ours against TRL's `GRPOTrainer`, on CPU.

Both sides: the embedded SmolLM2-135M-Instruct, a LoRA of rank 8 / alpha 16 / no dropout on
q,k,v,o,gate,up,down; one group of G=8 completions per step of one chat prompt; exactly 64
completion tokens each (vLLM `ignore_eos`, TRL `generation_kwargs={"min_new_tokens": 64}`);
temperature 1, top_p 1, top_k off; the same reward function, cheap and deterministic so that the
judge does not dominate: the share of the letter "e" in the completion (ours through
`ruler.ruler_score_group` with a `FunctionJudge`, TRL as a reward function); the same objective
(clipped ratio with epsilon 0.2 / 0.28, no KL, group-std-scaled advantages, token-level mean =
TRL's `loss_type="dapo"`), AdamW at the same learning rate, grad-norm clip 1.0, the same precision
of the frozen base weights (`--dtype`, default: what our `TrainerConfig(dtype="auto")` picks on this
machine; TRL gets `model_init_kwargs.dtype` and `bf16` to match), no gradient checkpointing on either
side (TRL's GRPOConfig turns it on by default; it trades time for memory). Our trainer runs with
its defaults (`TrainConfig()` micro-batches, prompt sharing).

Ours, one step: 8 rollouts through `model.openai_client()` (vLLM, `LocalBackend`), the judge, then
`model.train()` (GRPO update, checkpoint write, the new LoRA served), twice: with the LoRA merged
into the served weights (`ServerConfig(lora_serving="merged")`, the CPU default) and as a vLLM LoRA
adapter (`lora_serving="adapter"`, the CUDA default). TRL, one step: everything between its
`on_step_begin` and `on_step_end` callbacks (HF generate, reward, loss, backward, optimizer). They
alternate step by step in this process (TRL step k, then each of our step k, run from TRL's
step-end callback); the first step of each is a warm-up; medians of the rest. Each of our steps
also reports the trainer's `sampler_logprob_gap` (mean |trainer - rollout logprob|), so the two
serving modes' fidelity to the trained policy is compared too.

Also measured: our trainer's update alone on the last step's groups, interleaved: the old defaults
(fp32 base weights, no prompt sharing, micro-batch 4), then each trainer speed option added in turn
(bf16 base weights, prompt sharing, micro-batch 8 = today's defaults).

    pip install -e ".[bench]"           # TRL, a benchmark-only dependency
    python benchmarks/perf/perf_grpo_step.py  # ~6-8 min on 2 cores; writes benchmarks/perf/results/grpo_step.json
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Loop, print_table, ratio_entry, summary, write_result

import autorl as art
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from transformers import TrainerCallback
    from trl import GRPOTrainer as TRLGRPOTrainer

GROUP_SIZE = 8
COMPLETION_TOKENS = 64
LEARNING_RATE = 1e-5
PROMPT = [
    {"role": "system", "content": "You are a customer-support agent. Answer politely and briefly."},
    {"role": "user", "content": "I bought headphones 18 days ago and never used them. Can I still return them?"},
]


def e_share(text: str) -> float:
    """The reward of both sides: the share of the letter 'e' in the completion."""
    return text.count("e") / max(1, len(text))


def train_config(**overrides: Any) -> art.TrainConfig:
    return art.TrainConfig(learning_rate=LEARNING_RATE, epsilon=0.2, epsilon_high=0.28, **overrides)


class Side:
    """A full GRPO step of ours: rollouts, judge, training + serving the new weights."""

    def __init__(self, client: AsyncOpenAI, served_name: Callable[[], str]):
        from ruler import FunctionJudge

        self.client = client
        self.served_name = served_name  # a callable: the name to request now
        self.judge = FunctionJudge(lambda messages: e_share(messages[-1]["content"] or ""), name="e_share")
        self.steps: list[dict[str, float]] = []
        self.last_groups: list[art.TrajectoryGroup] = []

    async def rollout(self) -> art.Trajectory:
        response = await self.client.chat.completions.create(
            model=self.served_name(),
            messages=PROMPT,
            max_tokens=COMPLETION_TOKENS,
            temperature=1.0,
            top_p=1.0,
            logprobs=True,
            extra_body={"ignore_eos": True, "top_k": -1},
        )
        return art.Trajectory(messages_and_choices=[*PROMPT, response.choices[0]])

    async def train(self, groups: list[art.TrajectoryGroup]) -> dict:
        raise NotImplementedError

    async def step(self) -> None:
        from ruler import ruler_score_group

        t0 = time.perf_counter()
        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(self.rollout() for _ in range(GROUP_SIZE))], pbar_desc=None
        )
        t1 = time.perf_counter()
        groups = [await ruler_score_group(g, self.judge) for g in groups]
        t2 = time.perf_counter()
        metrics = await self.train(groups)
        t3 = time.perf_counter()
        self.last_groups = groups
        self.steps.append(
            {
                "total_s": t3 - t0,
                "rollouts_s": t1 - t0,
                "judge_s": t2 - t1,
                "train_and_serve_s": t3 - t2,
                "trainer_update_s": metrics["step_time_s"],
                "trained_tokens": metrics["trained_tokens"],
                "sampler_logprob_gap": metrics["sampler_logprob_gap"],
            }
        )


class Ours(Side):
    """Through the public API: `model.openai_client()` and `model.train()` on a `LocalBackend`."""

    def __init__(self, model: art.TrainableModel):
        super().__init__(model.openai_client(), model.get_inference_name)
        self.model = model

    async def train(self, groups: list[art.TrajectoryGroup]) -> dict:
        return await self.model.train(groups, config=train_config())


def trl_trainer(model_dir: Path, output_dir: Path, dtype: str, steps: int, callback: TrainerCallback) -> TRLGRPOTrainer:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from autorl.training.engines import lora_config

    config = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=GROUP_SIZE,
        num_generations=GROUP_SIZE,
        gradient_accumulation_steps=1,
        max_completion_length=COMPLETION_TOKENS,
        generation_kwargs={"min_new_tokens": COMPLETION_TOKENS},
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        gradient_checkpointing=False,
        bf16=dtype == "bfloat16",
        model_init_kwargs={"dtype": getattr(torch, dtype)},
        use_cpu=True,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )

    def e_share_reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [e_share(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    dataset = Dataset.from_list([{"prompt": PROMPT}] * (steps * GROUP_SIZE))
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[e_share_reward],
        args=config,
        train_dataset=dataset,
        peft_config=lora_config(art.TrainerConfig()),  # the LoRA our trainer builds
        callbacks=[callback],
    )


def trainer_ablation(
    model_dir: Path, home: Path, groups: list[art.TrajectoryGroup], reps: int
) -> dict[str, list[float]]:
    """Our trainer's update on the same groups, before and after each speed option, interleaved."""
    import torch

    from autorl.training.trainer import GRPOTrainer, training_dtype

    defaults = art.TrainerConfig(), art.TrainConfig()
    resolved = str(training_dtype(defaults[0].dtype, torch.device("cpu"))).removeprefix("torch.")
    variants = {  # the old defaults, then each speed option added in turn; the last is today's defaults
        "fp32, no prompt sharing, micro-batch 4 (old defaults)": ("float32", False, 4),
        "+ bf16 base weights": ("bfloat16", False, 4),
        "+ prompt sharing": ("bfloat16", True, 4),
        f"defaults: dtype auto ({resolved}), prompt sharing {defaults[0].share_prompt_prefix}, "
        f"micro-batch {defaults[1].micro_batch_size}": ("auto", defaults[0].share_prompt_prefix,
                                                        defaults[1].micro_batch_size),
    }  # fmt: skip
    trainers = {
        name: (
            GRPOTrainer(model_dir, home / f"ablation-{i}", art.TrainerConfig(dtype=dtype, share_prompt_prefix=share)),
            train_config(micro_batch_size=micro),
        )
        for i, (name, (dtype, share, micro)) in enumerate(variants.items())
    }
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for trainer, config in trainers.values():  # warm-up
        trainer.step(groups, config)
    names = list(trainers)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            trainer, config = trainers[name]
            times[name].append(trainer.step(groups, config)["step_time_s"])
    return times


def main() -> None:
    from autorl.training.trainer import training_dtype

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="measured steps per side, after one warm-up step")
    parser.add_argument(
        "--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help="base-weight precision, both sides"
    )
    parser.add_argument("--ablation-reps", type=int, default=3, help="repetitions of the trainer-only ablation")
    parser.add_argument("--no-adapter", action="store_true", help="measure only the default (merged) serving on CPU")
    args = parser.parse_args()
    started = time.monotonic()

    import torch
    from transformers import TrainerCallback

    from autorl.serving.config import ServerConfig

    logging.getLogger("transformers").setLevel(logging.ERROR)
    dtype = str(training_dtype(args.dtype, torch.device("cpu"))).removeprefix("torch.")
    model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
    home = Path(tempfile.mkdtemp(prefix="autorl-perf-grpo-"))
    loop = Loop()
    modes = ["merged"] + ([] if args.no_adapter else ["adapter"])
    backends = {mode: art.LocalBackend(home / mode, server=ServerConfig(lora_serving=mode)) for mode in modes}
    models = {
        mode: art.TrainableModel(name="perf", project="bench", trainer=art.TrainerConfig(dtype=dtype)) for mode in modes
    }
    trl_steps: list[float] = []
    sides: dict[str, Side] = {}

    class Interleave(TrainerCallback):
        """Times each TRL step; after it, runs one step of each of ours."""

        def on_step_begin(self, args_: object, state: object, control: object, **kwargs: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args_: object, state: object, control: object, **kwargs: Any) -> None:
            trl_steps.append(time.perf_counter() - self.t0)
            line = f"step {len(trl_steps)}/{args.steps + 1}: TRL {trl_steps[-1]:.1f}s"
            for name, side in sides.items():
                loop.run(side.step())
                s = side.steps[-1]
                line += (
                    f" | {name} {s['total_s']:.1f}s (rollouts {s['rollouts_s']:.1f}s, "
                    f"train+serve {s['train_and_serve_s']:.1f}s)"
                )
            print(line, flush=True)

    try:
        t = time.monotonic()

        async def start_servers() -> None:
            await asyncio.gather(*(models[mode].register(backends[mode]) for mode in modes))

        loop.run(start_servers())
        server_start_s = time.monotonic() - t
        for mode in modes:
            sides[f"ours, {mode} serving"] = Ours(models[mode])
        t = time.monotonic()
        trl = trl_trainer(model_dir, home / "trl", dtype, args.steps + 1, Interleave())
        trl_init_s = time.monotonic() - t
        trl.train()
        del trl
        for side in sides.values():
            loop.run(side.client.close())
        for backend in backends.values():
            backend.close()
        ablation = trainer_ablation(model_dir, home, sides["ours, merged serving"].last_groups, args.ablation_reps)
    finally:
        for backend in backends.values():
            backend.close()
        loop.close()

    trl_total = statistics.median(trl_steps[1:])
    conditions = (
        f"G={GROUP_SIZE}, {COMPLETION_TOKENS} completion tokens, SmolLM2-135M, LoRA r8 on 7 projections, "
        f"{dtype} base weights both sides, median of {args.steps} steps after a warm-up, "
        f"torch {torch.get_num_threads()} threads"
    )
    ratios = []
    for name, side in sides.items():
        ours_total = statistics.median(s["total_s"] for s in side.steps[1:])
        ratios.append(ratio_entry(f"GRPO step, {name} vs TRL GRPOTrainer", ours_total, trl_total, "s/step", 2.0,
                                  False, conditions))  # fmt: skip
    before = statistics.median(next(iter(ablation.values())))
    for name, times in list(ablation.items())[1:]:
        ratios.append(ratio_entry(f"trainer update, {name}, vs old defaults",
                                  statistics.median(times), before, "s/update", None, False,
                                  f"the {GROUP_SIZE} sequences of the last step, median of {args.ablation_reps}"))  # fmt: skip
    result = {
        "benchmark": "one GRPO step (G=8 rollouts, judge, train): ours vs TRL GRPOTrainer on CPU",
        "settings": {
            **vars(args),
            "dtype_resolved": dtype,
            "group_size": GROUP_SIZE,
            "completion_tokens": COMPLETION_TOKENS,
            "learning_rate": LEARNING_RATE,
            "reward": "share of the letter 'e' in the completion",
        },
        "trl_step_s": summary(trl_steps[1:]),
        "trl_warmup_step_s": round(trl_steps[0], 2),
        "ours_step_s": {
            name: {key: summary([s[key] for s in side.steps[1:]]) for key in side.steps[0]}
            for name, side in sides.items()
        },
        "ours_warmup_step_s": {name: round(side.steps[0]["total_s"], 2) for name, side in sides.items()},
        "setup_s": {"vllm_servers_start": round(server_start_s, 1), "trl_init": round(trl_init_s, 1)},
        "trainer_update_s": {name: summary(times) for name, times in ablation.items()},
        "ratios": ratios,
    }
    path = write_result("grpo_step", result, started)
    print()
    print_table(ratios)
    print(f"wrote {path} ({time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
