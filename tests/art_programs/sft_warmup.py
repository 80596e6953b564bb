"""A model warmed up with SFT before RL, as ART's 2026 docs write it: the JSONL of `{"messages": [...]}` read with
`iterate_file`, cut into chunks with one learning-rate schedule by `create_sft_dataset_iterator`, each chunk one
`model.train_sft` step; then RL steps with `backend.train(model, groups, learning_rate=...)`, whose `TrainResult`
metrics are logged explicitly (`model.log(metrics=..., step=...)`), as ART's backend-first training does.
Checkpoints count SFT and RL steps alike."""

from __future__ import annotations

import asyncio
import sys

import autorl as art
from autorl.local import LocalBackend
from autorl.utils.sft import create_sft_dataset_iterator, iterate_file

PROMPT = "Answer with yes, no or maybe."
QUESTIONS = ["Is the sky green?", "Will it snow tomorrow?"]


async def rollout(model: art.TrainableModel, question: str) -> art.Trajectory:
    messages: art.Messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": question}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=6, logprobs=True
    )
    choice = completion.choices[0]
    answer = (choice.message.content or "").strip().lower()
    reward = {"maybe": 1.0, "no": 0.75, "yes": 0.5}.get(answer.rstrip("."), 0.0)
    return art.Trajectory(messages_and_choices=[*messages, choice], reward=reward).finish()


async def main(backend: LocalBackend, sft_file: str) -> tuple[art.TrainableModel, list[art.TrainResult]]:
    model = art.TrainableModel(name="agent", project="art-programs", base_model="embedded:smollm2-135m")
    await model.register(backend)
    trajectories = list(iterate_file(sft_file, epochs=1))
    for chunk in create_sft_dataset_iterator(trajectories, chunk_size=1, epochs=1, batch_size=2, peak_lr=2e-4):
        await model.train_sft(chunk.trajectories, chunk.config, verbose=True)
    results = []
    for _ in range(2):
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, question) for _ in range(2)) for question in QUESTIONS),
            pbar_desc="gather",
        )
        await model.log(groups, split="train")
        result = await backend.train(model, groups, learning_rate=1e-5, allow_training_without_logprobs=True)
        await model.log(metrics=result.metrics, step=result.step, split="train")
        results.append(result)
    return model, results


if __name__ == "__main__":
    asyncio.run(main(LocalBackend(), sys.argv[1]))
