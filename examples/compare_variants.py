# %% [markdown]
# # Compare two agent variants, as ART's notebooks do
#
# Two variants of one agent are trained through the ART API (`TrainableModel`, `LocalBackend`, `model.log`,
# `backend.train`) on the embedded model, each logging a validation batch before training and after every step;
# then ART's analysis tools read what was logged (`load_trajectories`) and draw ART's comparison charts. With its
# imports changed from `autorl` to `art` (and `BASE_MODEL` to a model ART serves), this is an ART program.
#
# The task: name a thing of a kind in as few words as possible (the reward falls with every word past three).
# The variants differ in their learning rate. Run it with `python examples/compare_variants.py`; `STEPS`,
# `ART_PATH` and `OUT` (environment variables) set the training steps per variant, the backend's path and where
# the charts go. A few steps of a 135M model prove the plumbing, not a difference between the variants.

# %%
import asyncio
import os
import re
from pathlib import Path

import polars as pl

import autorl as art
from autorl.local import LocalBackend
from autorl.utils.benchmarking.charts import percentage_comparison_bar_chart, training_progress_chart
from autorl.utils.benchmarking.load_trajectories import load_trajectories
from autorl.utils.benchmarking.types import BenchmarkModelKey

PROJECT = "compare-variants"
BASE_MODEL = "embedded:smollm2-135m"
STEPS = int(os.environ.get("STEPS", "4"))
ART_PATH = os.environ.get("ART_PATH", ".autorl")
OUT = Path(os.environ.get("OUT", "."))
VARIANTS = {"lr-3e-4": 3e-4, "lr-3e-5": 3e-5}
KINDS = ["fruit", "colour", "animal", "country", "city", "planet", "metal", "flower", "tree", "sport"]
TRAIN, VAL = KINDS[:6], KINDS[6:]
SYSTEM = "Answer with the name alone."


# %% [markdown]
# ## The rollout: one question, one answer, a reward from a program


# %%
def brevity(text: str | None) -> float:
    """1 for an answer of one to three words, less for each word past three, 0 for none."""
    words = len(re.findall(r"\w+", text or ""))
    return 0.0 if words == 0 else max(0.0, 1.0 - max(0, words - 3) / 20)


async def rollout(model: art.TrainableModel, kind: str) -> art.Trajectory:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Name a {kind}."}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=24, temperature=1.0, logprobs=True
    )
    choice = completion.choices[0]
    trajectory = art.Trajectory(messages_and_choices=[*messages, choice], reward=brevity(choice.message.content))
    trajectory.metrics["words"] = len(re.findall(r"\w+", choice.message.content or ""))
    trajectory.metrics["short"] = float(trajectory.reward == 1.0)
    return trajectory


# %% [markdown]
# ## Train each variant, logging validation before training and after each step


# %%
async def validate(model: art.TrainableModel) -> None:
    groups = await art.gather_trajectory_groups(
        (art.TrajectoryGroup(rollout(model, kind) for _ in range(2)) for kind in VAL), pbar_desc="val"
    )
    await model.log(groups, split="val")


async def train_variant(name: str, learning_rate: float) -> None:
    async with LocalBackend(path=ART_PATH) as backend:
        model = art.TrainableModel(name=name, project=PROJECT, base_model=BASE_MODEL)
        await model.register(backend)
        if await model.get_step() == 0:
            await validate(model)
        for _ in range(await model.get_step(), STEPS):
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(rollout(model, kind) for _ in range(4)) for kind in TRAIN), pbar_desc="train"
            )
            await model.log(groups, split="train")
            result = await backend.train(model, groups, learning_rate=learning_rate)
            await model.log(metrics=result.metrics, step=result.step, split="train")
            await validate(model)


async def main() -> None:
    for name, learning_rate in VARIANTS.items():
        await train_variant(name, learning_rate)


if __name__ == "__main__":
    asyncio.run(main())

    # %% [markdown]
    # ## ART's comparison charts from what was logged

    # %%
    df = asyncio.run(load_trajectories(PROJECT, art_path=ART_PATH))
    val = df.filter(pl.col("split") == "val")
    print(val.group_by("model", "step").agg(pl.col("reward").mean()).sort("model", "step"))
    OUT.mkdir(parents=True, exist_ok=True)
    models = [BenchmarkModelKey(name, f"{name} (trained)") for name in VARIANTS]
    training_progress_chart(val, "reward", models=models, title="Validation reward").savefig(OUT / "progress.png")
    percentage_comparison_bar_chart(df, "short", models=models, title="Answers of 1-3 words").savefig(
        OUT / "comparison.png"
    )
    print(f"charts: {OUT / 'progress.png'}, {OUT / 'comparison.png'}")
