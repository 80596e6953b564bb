"""One full GRPO step (G=8 rollouts, judge, train) of ours against TRL's `GRPOTrainer`, on CPU.

Both sides: the embedded SmolLM2-135M-Instruct, a LoRA of rank 8 / alpha 16 / no dropout on
q,k,v,o,gate,up,down; one group of G=8 completions per step of one chat prompt; exactly 64
completion tokens each (vLLM `ignore_eos`, TRL `generation_kwargs={"min_new_tokens": 64}`);
temperature 1, top_p 1, top_k off; the same reward function, cheap and deterministic so that the
judge does not dominate: the share of the letter "e" in the completion (ours through
`ruler.ruler_score_group` with a `FunctionJudge`, TRL as a reward function); the same objective
(clipped ratio with epsilon 0.2 / 0.28, no KL, group-std-scaled advantages, token-level mean =
TRL's `loss_type="dapo"`), AdamW at the same learning rate, grad-norm clip 1.0, no gradient
checkpointing on either side (TRL's GRPOConfig turns it on by default; it trades time for memory).
Our trainer runs with its defaults (`TrainConfig()` micro-batches, prompt sharing).

The dtype policy, the same on both sides: the frozen base weights in `--dtype` (default: what our
`TrainerConfig(dtype="auto")` picks on this machine, bfloat16 on a CPU with avx512_bf16 or amx_bf16,
else float32; TRL gets it as `model_init_kwargs.dtype`), the LoRA weights and their AdamW state in
float32, no autocast (TRL's `bf16` flag, which turns on CPU autocast for the whole forward, is off;
our trainer uses none). Where each side generates differs by design: ours samples from vLLM, which
serves bfloat16 weights on CPU; TRL samples with HF generate on its training model, in `--dtype`.

Ours, one step: 8 rollouts through `model.openai_client()` (vLLM, `LocalBackend`), the judge, then
`model.train()` (GRPO update, checkpoint write, the new LoRA served), with the LoRA merged into the
served weights (`ServerConfig(lora_serving="merged")`, the CPU default) and, unless `--no-adapter`, as
a vLLM LoRA adapter (`lora_serving="adapter"`, the CUDA default). TRL, one step: everything between its
`on_step_begin` and `on_step_end` callbacks (HF generate, reward, loss, backward, optimizer).

Each side runs alone: TRL in a process of its own (this script with `--trl-only`) while this process
holds no server and no model; then each of our serving modes with only its own server alive, started
and stopped in turn. A side runs one warm-up step (excluded) and then `--steps` (at least 5) measured
steps; `--rounds` repeats the whole set, every other round in reverse order so that a drift of the
machine's speed favours no side. Reported: medians and [min, max] of the measured steps of all rounds, each
round's ratio (TRL's median step over ours in that round; the goal is met only if every round meets it),
and the fixed costs a run pays once (our server start, TRL's trainer init) with the steps after which
ours breaks even including them. Each of our steps also reports the trainer's `sampler_logprob_gap`
(mean |trainer - rollout logprob|), so the two serving modes' fidelity to the trained policy is compared.

Also measured: our trainer's update alone on the last step's groups, interleaved: the old defaults
(fp32 base weights, no prompt sharing, micro-batch 4, SDPA attention), then each trainer speed option added
in turn (bf16 base weights, prompt sharing, micro-batch 8, eager attention for short micro-batches =
today's defaults).

    pip install -e ".[bench]"           # TRL and datasets, benchmark-only dependencies
    python benchmarks/perf/perf_grpo_step.py  # writes benchmarks/perf/results/grpo_step.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Loop, print_table, ratio_entry, rotations, summary, write_result

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
        self.group_size, self.tokens = GROUP_SIZE, COMPLETION_TOKENS  # of the next step (`scaling.py` varies them)
        self.judge = FunctionJudge(lambda messages: e_share(messages[-1]["content"] or ""), name="e_share")
        self.steps: list[dict[str, float]] = []
        self.last_groups: list[art.TrajectoryGroup] = []

    async def rollout(self) -> art.Trajectory:
        response = await self.client.chat.completions.create(
            model=self.served_name(),
            messages=PROMPT,
            max_tokens=self.tokens,
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
            [art.TrajectoryGroup(self.rollout() for _ in range(self.group_size))], pbar_desc=None
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
        bf16=False,  # no autocast: base weights in `dtype`, the LoRA in float32, as our trainer does
        fp16=False,
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
        "fp32, no prompt sharing, micro-batch 4, SDPA (old defaults)": ("float32", False, 4, 0),
        "+ bf16 base weights": ("bfloat16", False, 4, 0),
        "+ prompt sharing": ("bfloat16", True, 4, 0),
        "+ micro-batch 8": ("bfloat16", True, 8, 0),
        f"defaults: dtype auto ({resolved}), prompt sharing {defaults[0].share_prompt_prefix}, "
        f"micro-batch {defaults[1].micro_batch_size}, eager attention up to "
        f"{defaults[0].eager_attention_max_tokens} tokens": ("auto", defaults[0].share_prompt_prefix,
                                                             defaults[1].micro_batch_size,
                                                             defaults[0].eager_attention_max_tokens),
    }  # fmt: skip
    trainers = {
        name: (
            GRPOTrainer(
                model_dir,
                home / f"ablation-{i}",
                art.TrainerConfig(dtype=dtype, share_prompt_prefix=share, eager_attention_max_tokens=eager),
            ),
            train_config(micro_batch_size=micro),
        )
        for i, (name, (dtype, share, micro, eager)) in enumerate(variants.items())
    }
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for trainer, config in trainers.values():  # warm-up
        trainer.step(groups, config)
    for name in rotations(list(trainers), reps):
        trainer, config = trainers[name]
        times[name].append(trainer.step(groups, config)["step_time_s"])
    return times


MIN_STEPS = 5
"""Measured steps per side at the least, after the warm-up."""


def trl_alone(model_dir: Path, dtype: str, steps: int, out: Path) -> None:
    """`--trl-only`: TRL's warm-up step and `steps` measured ones, in this process and nothing else; writes
    their times and the trainer's init time to `out` (JSON)."""
    from transformers import TrainerCallback

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args_: object, state: object, control: object, **kwargs: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args_: object, state: object, control: object, **kwargs: Any) -> None:
            times.append(time.perf_counter() - self.t0)
            print(f"TRL step {len(times)}/{steps + 1}: {times[-1]:.1f}s", flush=True)

    with tempfile.TemporaryDirectory(prefix="autorl-perf-trl-") as tmp:
        t = time.monotonic()
        trainer = trl_trainer(model_dir, Path(tmp), dtype, steps + 1, StepTimer())
        init_s = time.monotonic() - t
        trainer.train()
    out.write_text(json.dumps({"init_s": init_s, "steps_s": times}))


def run_trl(dtype: str, steps: int) -> dict:
    """TRL's steps in a process of its own (this script, `--trl-only`), while this one holds no server."""
    with tempfile.TemporaryDirectory(prefix="autorl-perf-trl-") as tmp:
        out = Path(tmp) / "trl.json"
        command = [sys.executable, __file__, "--trl-only", str(out), "--steps", str(steps), "--dtype", dtype]
        subprocess.run(command, check=True)
        return json.loads(out.read_text())


def run_ours(loop: Loop, home: Path, mode: str, dtype: str, steps: int) -> tuple[Ours, float]:
    """Our warm-up step and `steps` measured ones with `mode` serving, its server the only one alive (started
    here, stopped before returning); the side (its steps) and the server's start time."""
    from autorl.serving.config import ServerConfig

    backend = art.LocalBackend(home, server=ServerConfig(lora_serving=mode))
    model = art.TrainableModel(name="perf", project="bench", trainer=art.TrainerConfig(dtype=dtype))
    try:
        t = time.monotonic()
        loop.run(model.register(backend))
        start_s = time.monotonic() - t
        side = Ours(model)
        for _ in range(steps + 1):
            loop.run(side.step())
            s = side.steps[-1]
            print(
                f"ours, {mode} serving, step {len(side.steps)}/{steps + 1}: {s['total_s']:.1f}s (rollouts "
                f"{s['rollouts_s']:.1f}s, train+serve {s['train_and_serve_s']:.1f}s)",
                flush=True,
            )
        loop.run(side.client.close())
    finally:
        backend.close()
    return side, start_s


def break_even_steps(ours_fixed: float, ours_step: float, trl_fixed: float, trl_step: float) -> int | None:
    """The steps after which a run of ours, its fixed costs included, has taken no longer than TRL's; None: never
    (our step is not faster)."""
    if ours_step >= trl_step:
        return None
    return max(1, math.ceil((ours_fixed - trl_fixed) / (trl_step - ours_step)))


def per_round_ratios(trl_runs: list[dict], ours: list[tuple[Ours, float]]) -> list[float]:
    """TRL's median step over ours in each round (its measured steps, the warm-up excluded): a pooled median can
    hide rounds that disagree."""
    return [
        round(statistics.median(trl["steps_s"][1:]) / statistics.median(s["total_s"] for s in side.steps[1:]), 3)
        for trl, (side, _) in zip(trl_runs, ours, strict=True)
    ]


def main() -> None:
    from autorl.training.trainer import training_dtype

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=int,
        default=MIN_STEPS,
        help=f"measured steps per side and round (>= {MIN_STEPS}), after a warm-up",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of all sides, every other one in reverse order")
    parser.add_argument(
        "--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help="base-weight precision, both sides"
    )
    parser.add_argument("--ablation-reps", type=int, default=3, help="repetitions of the trainer-only ablation")
    parser.add_argument("--no-adapter", action="store_true", help="measure only the default (merged) serving on CPU")
    parser.add_argument(
        "--trl-only",
        type=Path,
        metavar="PATH",
        help="internal: run TRL's steps alone here and write their times to PATH",
    )
    args = parser.parse_args()
    if args.steps < MIN_STEPS:
        parser.error(f"--steps must be at least {MIN_STEPS}: a median of fewer steps is no figure")
    started = time.monotonic()

    import torch

    logging.getLogger("transformers").setLevel(logging.ERROR)
    dtype = str(training_dtype(args.dtype, torch.device("cpu"))).removeprefix("torch.")
    model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
    if args.trl_only:
        trl_alone(model_dir, dtype, args.steps, args.trl_only)
        return
    home = Path(tempfile.mkdtemp(prefix="autorl-perf-grpo-"))
    modes = ["merged"] + ([] if args.no_adapter else ["adapter"])
    names = {mode: f"ours, {mode} serving" for mode in modes}
    trl_runs: list[dict] = []
    ours_runs: dict[str, list[tuple[Ours, float]]] = {mode: [] for mode in modes}
    loop = Loop()
    try:
        for round_ in range(args.rounds):
            order = ["trl", *modes] if round_ % 2 == 0 else [*reversed(modes), "trl"]
            for what in order:
                if what == "trl":
                    trl_runs.append(run_trl(dtype, args.steps))
                else:
                    ours_runs[what].append(run_ours(loop, home / f"round-{round_}" / what, what, dtype, args.steps))
    finally:
        loop.close()
    last_groups = ours_runs["merged"][-1][0].last_groups
    ablation = trainer_ablation(model_dir, home, last_groups, args.ablation_reps)

    trl_steps = [t for run in trl_runs for t in run["steps_s"][1:]]
    trl_step = statistics.median(trl_steps)
    trl_fixed = statistics.median(run["init_s"] + run["steps_s"][0] - trl_step for run in trl_runs)
    conditions = (
        f"G={GROUP_SIZE}, {COMPLETION_TOKENS} completion tokens, SmolLM2-135M, LoRA r8 on 7 projections (float32), "
        f"{dtype} base weights both sides, no autocast; each side alone (TRL in its own process); median of "
        f"{args.steps} steps x {args.rounds} rounds after a warm-up per round; torch {torch.get_num_threads()} threads"
    )
    ratios, ours_steps, fixed_costs = [], {}, {}
    for mode, runs in ours_runs.items():
        steps = [s for side, _ in runs for s in side.steps[1:]]
        ours_step = statistics.median(s["total_s"] for s in steps)
        ours_fixed = statistics.median(start + side.steps[0]["total_s"] - ours_step for side, start in runs)
        ours_steps[names[mode]] = {key: summary([s[key] for s in steps]) for key in steps[0]}
        fixed_costs[names[mode]] = {
            "server_start_s": summary([start for _, start in runs]),
            "warmup_step_s": summary([side.steps[0]["total_s"] for side, _ in runs]),
            "fixed_s": round(ours_fixed, 1),
            "break_even_steps_vs_trl": break_even_steps(ours_fixed, ours_step, trl_fixed, trl_step),
        }
        entry = ratio_entry(f"GRPO step, {names[mode]} vs TRL GRPOTrainer", ours_step, trl_step, "s/step", 2.0,
                            False, conditions)  # fmt: skip
        entry["per_round"] = per_round_ratios(trl_runs, runs)
        entry["goal_met_every_round"] = all(r >= 2.0 for r in entry["per_round"])
        ratios.append(entry)
    before = statistics.median(next(iter(ablation.values())))
    for name, times in list(ablation.items())[1:]:
        ratios.append(ratio_entry(f"trainer update, {name}, vs old defaults",
                                  statistics.median(times), before, "s/update", None, False,
                                  f"the {GROUP_SIZE} sequences of the last step, median of {args.ablation_reps}"))  # fmt: skip
    result = {
        "benchmark": "one GRPO step (G=8 rollouts, judge, train): ours vs TRL GRPOTrainer on CPU, each side alone",
        "settings": {
            **{k: v for k, v in vars(args).items() if k != "trl_only"},
            "dtype_resolved": dtype,
            "dtype_policy": f"base weights {dtype}, LoRA and AdamW state float32, no autocast, both sides",
            "group_size": GROUP_SIZE,
            "completion_tokens": COMPLETION_TOKENS,
            "learning_rate": LEARNING_RATE,
            "reward": "share of the letter 'e' in the completion",
        },
        "trl_step_s": summary(trl_steps),
        "trl_fixed_costs": {
            "init_s": summary([run["init_s"] for run in trl_runs]),
            "warmup_step_s": summary([run["steps_s"][0] for run in trl_runs]),
            "fixed_s": round(trl_fixed, 1),
        },
        "ours_step_s": ours_steps,
        "ours_fixed_costs": fixed_costs,
        "trainer_update_s": {name: summary(times) for name, times in ablation.items()},
        "ratios": ratios,
    }
    path = write_result("grpo_step", result, started)
    print()
    print_table(ratios)
    for entry in ratios[: len(modes)]:
        print(f"{entry['name']}: per round {entry['per_round']}")
    for name, costs in fixed_costs.items():
        print(f"{name}: fixed {costs['fixed_s']}s vs TRL's {trl_fixed:.1f}s; breaks even after "
              f"{costs['break_even_steps_vs_trl'] or 'no number of'} steps")  # fmt: skip
    print(f"wrote {path} ({time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
