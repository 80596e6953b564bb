"""Scored groups of the tiny model's tokens, and backends that train for real without a vLLM server (a serving
stand-in, a scripted OpenAI endpoint): what the trainer, backend and ART-API tests share."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import autorl as art
from autorl.backends.model_backend import ModelSlot
from autorl.config import TrainerConfig
from autorl.serving.config import ServerConfig
from autorl.trajectories import Trajectory, TrajectoryGroup
from tests.helpers.remote import ScriptedPlacement
from tests.helpers.tiny import choice

PROMPT = [
    {"role": "system", "content": "You are a helpful assistant. Answer politely and briefly, please."},
    {"role": "user", "content": "Reply to a customer asking for a refund, politely, in two sentences."},
]


def groups(tokenizer, prompts: int = 2, size: int = 4) -> list[TrajectoryGroup]:
    rng = random.Random(0)
    result = []
    for p in range(prompts):
        messages = [PROMPT[0], {"role": "user", "content": PROMPT[1]["content"] + " yes" * p}]
        trajectories = []
        for i in range(size):
            ids = [rng.randrange(3, len(tokenizer)) for _ in range(rng.randrange(3, 9))]
            logprobs = [-rng.uniform(1, 6) for _ in ids]
            trajectories.append(
                Trajectory(messages_and_choices=[*messages, choice(tokenizer.decode(ids), ids, logprobs)], reward=i)
            )
        result.append(TrajectoryGroup(trajectories))
    return result


class ServingStandIn:
    """What the backend asks of a model's serving after a step, for a backend test without a server: it
    "holds" the step served last (as merged serving does)."""

    base_url = "http://127.0.0.1:1/v1"
    api_key = "stand-in-key"

    def __init__(self):
        self.held: set[int] = set()

    def transport(self):
        return None

    async def serve(self, step):
        self.held = {step} - {0}
        return "policy"

    async def retire(self, step):
        pass

    def served_steps(self):
        return set(self.held)

    async def recover(self):
        return True

    def close(self):
        pass


def backend_with_model(tiny_model, home, **fields) -> tuple[art.LocalBackend, art.TrainableModel]:
    """A `LocalBackend` whose model is served by a stand-in (no vLLM) and trained by the real trainer."""
    backend = art.LocalBackend(home)
    model = art.TrainableModel(
        name="policy", project="p", base_model=str(tiny_model), trainer=TrainerConfig(dtype="float32"), **fields
    )
    backend._slots[model.name] = ModelSlot(backend.run_dir(model), ServingStandIn())
    asyncio.run(model.register(backend))
    return backend, model


def local_backend(home: Path, chat_server) -> art.LocalBackend:
    """A `LocalBackend` whose trainer is real and whose serving is scripted (no vLLM)."""
    config = ServerConfig(lora_serving="adapter")
    backend = art.LocalBackend(home, server=config)
    backend.placement = ScriptedPlacement(chat_server, config)
    return backend
