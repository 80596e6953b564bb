"""The tool-use learning task's judge (benchmarks/perf/learning_tasks/judges.py:tool_call) and task file."""

from pathlib import Path

import pytest

from autorl.task import load_task
from benchmarks.perf.learning_tasks.judges import json_keys, tool_call

TASK = Path(__file__).resolve().parents[1] / "benchmarks" / "perf" / "learning_tasks" / "tool_call.toml"
QUESTION = [{"role": "system", "content": "Convert units."}, {"role": "user", "content": "3 miles in km?"}]


def called(name: str, result: str) -> list[dict]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": '{"value": 3}'}}
    return [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
        {"role": "assistant", "content": "That is 4.83 km."},
    ]


@pytest.mark.parametrize(
    "messages, score",
    [
        (called("convert", "3 mi = 4.82803 km"), 1.0),  # the tool accepted the call
        (called("convert", "error: invalid arguments for 'convert': 'from_unit' is a required property"), 0.5),
        (called("search", "error: unknown tool 'search'; available: convert"), 0.5),
        ([*QUESTION, {"role": "assistant", "content": '<tool_call>{"name": "convert"'}], 0.24),  # not parsed
        ([*QUESTION, {"role": "assistant", "content": '<tool_call>{"name": "convert", "arguments": {"value": 3'}], 0.4),
        ([*QUESTION, {"role": "assistant", "content": 'Use {"name": "converter", "arguments": {}}'}], 0.16),
        ([*QUESTION, {"role": "assistant", "content": "3 miles is about 4.8 km."}], 0.0),
        (QUESTION, 0.0),
    ],
)
def test_tool_call_scores_the_use_of_the_tools(messages, score):
    assert tool_call(messages) == score


def test_the_tool_task_loads_its_tool_and_inputs():
    task = load_task(str(TASK))
    assert [tool.name for tool in task.tools] == ["convert"] and task.max_turns == 2
    rows = (TASK.parent / task.inputs_file).read_text().splitlines()
    assert len(rows) == 40 and sum('"split": "val"' in row for row in rows) == 12


@pytest.mark.parametrize(
    "answer, score",
    [
        ('{"a": 1, "b": 2}', 1.0),
        ('{"a": 1}', 0.0),
        ('{"a": 1, "b": 2, "c": 3}', 0.0),
        ("[1, 2]", 0.0),
        ("a and b", 0.0),
    ],
)
def test_json_keys_is_all_or_nothing(answer, score):
    assert json_keys([*QUESTION, {"role": "assistant", "content": answer}]) == score
