"""An agent written without trajectory code, trained through ART's capture scopes: a plain OpenAI-SDK agent with
a tool and two turns (the second streamed, with logprobs) sets its reward on `art.current_trajectory()`;
`art.trajectory(...)` records its calls and `art.trajectory_group(...)` makes the group, trained through the
backend as ART's 2026 docs write it. `main_2025` runs the same agent under ART's 2025 names
(`art.capture_auto_trajectory`, `art.auto_trajectory`)."""

from __future__ import annotations

import asyncio
import json

import autorl as art
from autorl.local import LocalBackend

TOOLS: art.Tools = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
]


async def agent(model: art.Model, a: int, b: int, current=art.current_trajectory) -> None:
    """Asks, runs the tool call if the model made one (else asks again), then streams the answer."""
    client = model.openai_client()
    messages: list = [
        {"role": "system", "content": "Use the add tool, then give the sum."},
        {"role": "user", "content": f"What is {a} + {b}?"},
    ]
    first = await client.chat.completions.create(
        model=model.get_inference_name(), messages=messages, tools=TOOLS, max_tokens=24, temperature=1.0
    )
    message = first.choices[0].message
    messages.append(message)
    for call in message.tool_calls or []:
        try:
            result = sum(json.loads(call.function.arguments).values())
        except (ValueError, TypeError, AttributeError):
            result = "error: give a and b as numbers"
        messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
    if not message.tool_calls:
        messages.append({"role": "user", "content": "The sum, as a number?"})
    stream = await client.chat.completions.create(
        model=model.get_inference_name(), messages=messages, tools=TOOLS, max_tokens=16, temperature=1.0,
        logprobs=True, stream=True,
    )  # fmt: skip
    answer = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    current(require=True).reward = float(str(a + b) in answer) + len(answer) / 100


async def main(backend: LocalBackend) -> tuple[art.TrainableModel, art.TrajectoryGroup, art.TrainResult]:
    model = art.TrainableModel(name="agent", project="art-programs", base_model="embedded:smollm2-135m")
    await model.register(backend)
    group = await art.trajectory_group(art.trajectory(agent(model, 2, 3)) for _ in range(3))
    result = await backend.train(model, [group], learning_rate=1e-5)
    await model.log(metrics=result.metrics, step=result.step)
    return model, group, result


async def main_2025(backend: LocalBackend) -> tuple[art.TrainableModel, list[art.TrajectoryGroup], dict]:
    def current(require: bool) -> art.Trajectory:
        return art.auto_trajectory(required=require)

    model = art.TrainableModel(name="agent", project="art-programs", base_model="embedded:smollm2-135m")
    await model.register(backend)
    groups = await art.gather_trajectory_groups(
        [art.TrajectoryGroup(art.capture_auto_trajectory(agent(model, 4, 1, current)) for _ in range(3))]
    )
    return model, groups, await model.train(groups, config=art.TrainConfig(learning_rate=1e-5))


if __name__ == "__main__":
    asyncio.run(main(LocalBackend()))
