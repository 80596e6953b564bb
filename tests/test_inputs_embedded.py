"""Input generation with the embedded 135M model through a real vLLM server (slow: starts the server)."""

from __future__ import annotations

import pytest

from autorl.inputs.generation import GenerationConfig, generate_inputs
from autorl.task import TaskSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # about 100 s on 2 cores


def test_embedded_model_writes_a_system_prompt_and_split_unique_inputs():
    task = TaskSpec(
        description="Solve grade-school math word problems; end your reply with 'Answer: <number>'.",
        seed_examples=["Tom has 3 apples and buys 5 more. How many apples does he have?"],
    )
    result = generate_inputs(task, n=8, generator="embedded", seed=0, config=GenerationConfig(val_fraction=0.25))

    assert result.system_prompt.strip()
    assert len(result.inputs) == 8
    assert len({row.input for row in result.inputs}) == 8
    assert len(result.train) == 6 and len(result.val) == 2
    assert not set(result.train) & set(result.val)
    assert {row.generator for row in result.inputs} == {"embedded:smollm2-135m"}
    assert result.stats.calls >= 2  # a request holds 4 candidates
    # the inputs' requests and the system prompt's (asked again when its answer is unusable)
    assert len(result.calls) >= result.stats.calls + 1 and all(c.completion_tokens > 0 for c in result.calls)
