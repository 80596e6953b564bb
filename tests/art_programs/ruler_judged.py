"""A single-turn agent scored by RULER, as ART's RULER examples train one: each step's group of answers is
ranked by a judge through `art.rewards.ruler_score_group` as soon as it is gathered (a group the judge cannot
score is dropped, `swallow_exceptions`), then trained on; LiteLLM-based code reaches the same model through
`model.litellm_completion_params()`."""

from __future__ import annotations

import asyncio

import litellm

import autorl as art
from autorl.local import LocalBackend
from autorl.rewards import ruler_score_group

JUDGE = "embedded"
"""ART's examples name an API model here ("openai/o4-mini"); the embedded model keeps the test offline."""
QUESTIONS = ["Name a fruit.", "Name a colour."]


async def rollout(model: art.Model, question: str) -> art.Trajectory:
    messages: art.Messages = [{"role": "user", "content": question}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=12, logprobs=True
    )
    return art.Trajectory(messages_and_choices=[*messages, completion.choices[0]], reward=0.0)


async def main(backend: LocalBackend) -> tuple[art.TrainableModel, str | None]:
    model = art.TrainableModel(name="agent", project="art-programs", base_model="embedded:smollm2-135m")
    await model.register(backend)
    for question in QUESTIONS:
        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(model, question) for _ in range(3))],
            pbar_desc="gather",
            after_each=lambda group: ruler_score_group(group, JUDGE, swallow_exceptions=True),
        )
        await model.train(groups, config=art.TrainConfig(learning_rate=1e-5))
    reply = await litellm.acompletion(
        messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, **model.litellm_completion_params()
    )
    return model, reply.choices[0].message.content


if __name__ == "__main__":
    asyncio.run(main(LocalBackend()))
