"""A multi-turn game, as ART's 2048 and tic-tac-toe examples train one: the agent guesses a secret number in up
to `max_turns` turns and is told "higher" or "lower"; the reward says how close it came. The rollout asks for
no logprobs, is retried on a cut-off completion, and reads its settings from the model's own config; each step
logs a validation batch and deletes the checkpoints ART's policy leaves out (the latest and the best by
val/reward stay)."""

from __future__ import annotations

import asyncio
import random
import re

import openai
from pydantic import BaseModel

import autorl as art
from autorl.local import LocalBackend

NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


class GameConfig(BaseModel):
    max_turns: int = 3
    max_tokens: int = 8
    highest: int = 10


@art.retry(exceptions=(openai.LengthFinishReasonError,))
async def rollout(model: art.Model[GameConfig], secret: int) -> art.Trajectory:
    config = model.config
    client = model.openai_client()
    messages: art.Messages = [
        {"role": "system", "content": f"Guess my number from 1 to {config.highest}. Reply with the number only."},
        {"role": "user", "content": "Your first guess?"},
    ]
    history: art.MessagesAndChoices = list(messages)
    trajectory = art.Trajectory(messages_and_choices=history, reward=0.0, metadata={"secret": secret})
    written = 0
    for turn in range(1, config.max_turns + 1):
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=trajectory.messages(),
            max_tokens=config.max_tokens,
            temperature=1.0,
        )
        choice = completion.choices[0]
        trajectory.messages_and_choices.append(choice)
        trajectory.metrics["turns"] = turn
        reply = choice.message.content or ""
        written += len(reply)
        guess = read_number(reply)
        if guess is None:
            trajectory.reward = -1.0  # no number: the worst outcome
            break
        trajectory.reward = 1.0 - abs(guess - secret) / config.highest
        if guess == secret:
            break
        hint = "Higher." if guess < secret else "Lower."
        trajectory.messages_and_choices.append({"role": "user", "content": f"{hint} Guess again."})
    trajectory.reward -= written / 1000  # "the number only": of two equal games, the terser wins
    return trajectory


def read_number(reply: str) -> int | None:
    """The first number in a reply, in digits or as a word ("five")."""
    match = re.search(r"\d+|\b(" + "|".join(NUMBER_WORDS) + r")\b", reply.lower())
    if match is None:
        return None
    return int(match.group()) if match.group().isdigit() else NUMBER_WORDS.index(match.group()) + 1


async def main(backend: LocalBackend) -> art.TrainableModel:
    model = art.TrainableModel(
        name="agent",
        project="art-programs",
        base_model="embedded:smollm2-135m",
        config=GameConfig(),
        _internal_config=art.dev.InternalModelConfig(engine_args=art.dev.EngineArgs(gpu_memory_utilization=0.7)),
    )
    await model.register(backend)
    rng = random.Random(0)
    start = await model.get_step()
    for _ in range(start, start + 2):
        validation = await art.gather_trajectories(
            (rollout(model, rng.randint(1, 10)) for _ in range(2)), pbar_desc="val", max_exceptions=2
        )
        await model.log(validation, split="val")
        secret = rng.randint(1, 10)
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, secret) for _ in range(3)) for _ in range(1)),
            pbar_desc="gather",
            max_exceptions=3,
        )
        await model.delete_checkpoints()
        await model.train(
            groups,
            config=art.TrainConfig(learning_rate=1e-5),
            _config=art.dev.TrainConfig(allow_training_without_logprobs=True),
        )
    return model


if __name__ == "__main__":
    asyncio.run(main(LocalBackend()))
