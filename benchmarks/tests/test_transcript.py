"""benchmarks/perf/transcript.py: one held-out input's rollouts before and after training, read from a run's
evaluation artifact (groups as the pipeline writes them: ART trajectories, choices holding the messages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transcript import transcript


def rollout(variant: str, question: str, reward: float, *turns: dict) -> dict:
    choices = [
        {"finish_reason": "stop", "index": 0, "message": turn} if turn["role"] == "assistant" else turn
        for turn in turns
    ]
    return {
        "messages_and_choices": [
            {"role": "system", "content": "task"},
            {"role": "user", "content": question},
            *choices,
        ],
        "reward": reward,
        "metadata": {"input": question, "variant": variant},
    }


CALL = {"id": "c1", "type": "function", "function": {"name": "lookup_extension", "arguments": '{"name": "Ada Park"}'}}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    groups = tmp_path / "artifacts" / "evaluate" / "k" / "groups.jsonl"
    groups.parent.mkdir(parents=True)
    ada, bruno = "What is Ada Park's extension?", "And Bruno Vela's?"
    lines = [
        [rollout("base", ada, 0.0, {"role": "assistant", "content": "It is\n 1234."}),
         rollout("base", ada, 0.1, {"role": "assistant", "content": "a second sample"})],
        [rollout("latest", ada, 1.0, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                 {"role": "tool", "tool_call_id": "c1", "content": "Ada Park: extension 8629"},
                 {"role": "assistant", "content": "8629"})],
        [rollout("base", bruno, 0.0, {"role": "assistant", "content": "no idea"})],
    ]  # fmt: skip
    groups.write_text(
        "".join(json.dumps({"trajectories": line, "exceptions": [], "metadata": {}}) + "\n" for line in lines)
    )
    return tmp_path


def test_the_first_sample_of_each_variant_with_its_tool_calls_and_results(home):
    assert transcript(home) == (
        "base (score 0.00):\n```\nuser: What is Ada Park's extension?\nassistant: It is 1234.\n```\n\n"
        "latest (score 1.00):\n```\nuser: What is Ada Park's extension?\n"
        'assistant calls lookup_extension({"name": "Ada Park"})\ntool: Ada Park: extension 8629\nassistant: 8629\n```'
    )
    assert transcript(home, 1).startswith("base (score 0.00):\n```\nuser: And Bruno Vela's?\nassistant: no idea")


def test_an_input_out_of_range_is_one_line(home):
    with pytest.raises(SystemExit, match=r"--input 2: the evaluation has 2 inputs \(0 to 1\)"):
        transcript(home, 2)
