"""ART's asynchronous `PipelineTrainer` as ART's own programs use it (its local smoke test of the binary-prefix
task): a rollout function that samples a whole group in one request (`n=`), an eval function that names the
checkpoint it evaluates (`model.get_inference_name(step)`), scenarios cycled without end, `max_steps` and
`eval_every_n_steps`. Only the imports differ from ART's."""

from __future__ import annotations

import asyncio
from functools import partial
from itertools import cycle

import autorl as art
from autorl.local import LocalBackend
from autorl.pipeline_trainer import PipelineTrainer

BASE_MODEL = "embedded:smollm2-135m"
SECRET = "1100101001110011"
ROLLOUTS_PER_SCENARIO = 4
MAX_TOKENS = 8
MAX_STEPS = 2


def build_scenarios() -> list[dict[str, str]]:
    templates = [
        "Output exactly {length} binary digits using only 0 and 1. Do not add spaces or explanation.",
        "Respond with a {length}-character binary string. Only print the bitstring.",
    ]
    return [{"prompt": t.format(length=len(SECRET)), "secret": SECRET} for t in templates]


def reward_for_answer(text: str, secret: str) -> float:
    guess = "".join(ch for ch in text if ch in "01")
    if not guess:
        return -0.1
    matches = sum(1 for guessed, actual in zip(guess, secret, strict=False) if guessed == actual)
    return matches / len(secret) - abs(len(guess) - len(secret)) * 0.01 + len(text) * 1e-3


async def eval_fn(
    model: art.TrainableModel, step: int, _config: None, *, scenarios: list[dict[str, str]]
) -> list[art.Trajectory]:
    trajectories: list[art.Trajectory] = []
    client = model.openai_client()
    for scenario in scenarios:
        messages: art.Messages = [{"role": "user", "content": scenario["prompt"]}]
        response = await client.chat.completions.create(
            messages=messages, model=model.get_inference_name(step), max_tokens=MAX_TOKENS, temperature=0.3
        )
        choice = response.choices[0]
        reward = reward_for_answer(choice.message.content or "", scenario["secret"])
        trajectories.append(art.Trajectory(messages_and_choices=[*messages, choice], reward=reward))
    return trajectories


async def rollout_fn(model: art.TrainableModel, scenario: dict[str, str], _config: None) -> art.TrajectoryGroup:
    messages: art.Messages = [{"role": "user", "content": scenario["prompt"]}]
    response = await model.openai_client().chat.completions.create(
        messages=messages, model=model.get_inference_name(), max_tokens=MAX_TOKENS, n=ROLLOUTS_PER_SCENARIO,
        temperature=1.1, logprobs=True,
    )  # fmt: skip
    return art.TrajectoryGroup(
        art.Trajectory(
            messages_and_choices=[*messages, choice],
            reward=reward_for_answer(choice.message.content or "", scenario["secret"]),
        )
        for choice in response.choices
    )


async def main(backend: LocalBackend, base_model: str = BASE_MODEL, **model_fields) -> art.TrainableModel:
    model = art.TrainableModel(name="pipelined", project="art-programs", base_model=base_model, **model_fields)
    await model.register(backend)
    base_scenarios = build_scenarios()
    trainer = PipelineTrainer(
        model=model,
        backend=backend,
        rollout_fn=rollout_fn,
        scenarios=cycle(base_scenarios),
        config=None,
        learning_rate=5e-6,
        loss_fn="cispo",
        eval_fn=partial(eval_fn, scenarios=base_scenarios),
        min_batch_size=2,
        discard_queue_multiplier=500,
        max_steps=MAX_STEPS,
        eval_every_n_steps=1,
        eval_at_start=False,
        save_checkpoint=False,
    )
    await trainer.train()
    return model


if __name__ == "__main__":
    asyncio.run(main(LocalBackend()))
