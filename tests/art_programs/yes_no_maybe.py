"""ART's yes/no/maybe example as its 2026 docs write it: prompts that vary their wording, groups gathered as they
finish (`art.trajectory_group_batches`: the next batch's rollouts run while a step trains, naming the checkpoint
served when they started), a concurrency limit on the rollout (`art.utils.limit_concurrency`), training through
the backend (`backend.train(model, groups, learning_rate=..., ...)`) and explicit logs; the
second step's groups are scored by RULER (`ruler_score_group`, its explanation in each trajectory's logs)."""

from __future__ import annotations

import asyncio
import itertools

import autorl as art
from autorl.local import LocalBackend
from autorl.rewards import ruler_score_group
from autorl.utils import limit_concurrency

JUDGE = "embedded"
"""ART's docs name an API model here ("openai/o4-mini"); the embedded model keeps the test offline."""


def prompts() -> list[str]:
    """The example's prompts: its instruction in several wordings."""
    return [
        f"{prefix} with {', '.join(words)}. {suffix}"
        for prefix, words, suffix in itertools.product(
            ["Respond", "Just respond"], [("yes", "no", "maybe"), ("maybe", "yes", "no")], ["", "Be brief."]
        )
    ]


@limit_concurrency(4)
async def rollout(model: art.TrainableModel, prompt: str) -> art.Trajectory:
    messages: art.Messages = [{"role": "user", "content": prompt}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=6, logprobs=True
    )
    choice = completion.choices[0]
    content = (choice.message.content or "").strip().lower()
    reward = {"maybe": 1.0, "no": 0.75, "yes": 0.5}.get(content.rstrip("."), 0.0)
    return art.Trajectory(messages_and_choices=[*messages, choice], reward=reward, metrics={"length": len(content)})


async def main(backend: LocalBackend) -> tuple[art.TrainableModel, list[art.TrainResult], list[art.TrajectoryGroup]]:
    model = art.TrainableModel(name="agent", project="art-programs", base_model="embedded:smollm2-135m")
    await model.register(backend)
    results, judged = [], []
    groups_of_steps = (art.TrajectoryGroup(rollout(model, prompt) for _ in range(2)) for prompt in prompts()[:4])
    async for batch in art.trajectory_group_batches(groups_of_steps, batch_size=2, max_concurrent_batches=1):
        if results:  # the second step: RULER ranks each group's answers instead of the rule
            scored = await asyncio.gather(*(ruler_score_group(g, JUDGE, swallow_exceptions=True) for g in batch))
            batch = [g for g in scored if g is not None]
            judged += batch
        await model.log(batch, split="train")
        result = await backend.train(model, batch, learning_rate=1e-5, epsilon=0.2, scale_rewards=True, verbose=True)
        await model.log(metrics=result.metrics, step=result.step, split="train")
        results.append(result)
    return model, results, judged


if __name__ == "__main__":
    asyncio.run(main(LocalBackend()))
