"""An agent with a tool trained over a dataset, as ART's examples loop over theirs: `iterate_dataset` gives the
steps' batches of scenarios, resuming at the model's step; each scenario is a group of rollouts offered the
tool (`art.Tools`); the checkpoints ART's policy leaves out are deleted before each step."""

from __future__ import annotations

import asyncio

import autorl as art
from autorl.local import LocalBackend
from autorl.utils import iterate_dataset

TOOLS: art.Tools = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up the meaning of a word.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        },
    }
]
WORDS = ["apple", "river", "quiet", "orbit", "lantern", "maple"]
STEPS = 2


async def rollout(model: art.Model, word: str) -> art.Trajectory:
    messages: art.Messages = [
        {"role": "system", "content": "Call the lookup tool with the word, or define it in one short line."},
        {"role": "user", "content": f"What does {word} mean?"},
    ]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, tools=TOOLS, max_tokens=16, temperature=1.0
    )
    choice = completion.choices[0]
    called = bool(choice.message.tool_calls)
    reward = float(called) + len(choice.message.content or "") / 100  # a tool call, else a shorter definition
    return art.Trajectory(
        messages_and_choices=[*messages, choice], tools=TOOLS, reward=reward, metrics={"called": called}
    )


async def main(backend: LocalBackend) -> art.TrainableModel:
    model = art.TrainableModel(name="agent", project="art-programs", base_model="embedded:smollm2-135m")
    await model.register(backend)
    start = await model.get_step()
    for batch in iterate_dataset(WORDS, groups_per_step=2, num_epochs=50, initial_step=start):
        if batch.step >= start + STEPS:
            break
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, word) for _ in range(2)) for word in batch.items),
            pbar_desc=f"step {batch.step}",
        )
        await model.delete_checkpoints()
        await model.train(groups)
    return model


if __name__ == "__main__":
    asyncio.run(main(LocalBackend()))
