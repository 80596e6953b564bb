"""Task descriptions and TOML task files, and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from autorl.errors import AutoRLError
from autorl.task import RUN_SETTINGS, TaskSpec, ToolSpec, load_task
from tests.helpers.docs import DOCS, marked_block, pages

REPO = Path(__file__).resolve().parents[1]

FULL = '''
description = """Answer questions about converting units; call `convert` for every conversion."""
generator_instructions = "Mix metric and imperial units."
seed_examples = ["How many km is 3 miles?", "What is 20 C in F?"]
num_inputs = 12
rubric = "Correct result with its unit scores highest."

[[tools]]
name = "convert"
description = "Convert a value between units."
parameters = { type = "object", properties = { value = { type = "number" } }, required = ["value"] }
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "task.toml"
    path.write_text(text)
    return path


def test_plain_string_is_a_description():
    task = load_task("  Summarize news articles in one sentence.  ")
    assert task == TaskSpec(description="Summarize news articles in one sentence.")
    assert (task.num_inputs, task.seed_examples, task.tools, task.rubric) == (32, [], [], "")


def test_full_task_file(tmp_path):
    path = write(tmp_path, FULL)
    task = load_task(path)
    assert load_task(str(path)) == task
    assert task.description.startswith("Answer questions about converting units")
    assert task.generator_instructions == "Mix metric and imperial units."
    assert task.seed_examples == ["How many km is 3 miles?", "What is 20 C in F?"]
    assert task.num_inputs == 12
    assert task.tools[0].to_openai() == {
        "type": "function",
        "function": {
            "name": "convert",
            "description": "Convert a value between units.",
            "parameters": {"type": "object", "properties": {"value": {"type": "number"}}, "required": ["value"]},
        },
    }


def test_tool_parameters_default_to_an_empty_object_schema():
    assert ToolSpec(name="now").parameters == {"type": "object", "properties": {}}


READY_MADE = ("pipelines/tasks", "examples", "benchmarks/perf/learning_tasks")
"""Where task files ship: the pipeline's, the examples a user runs, the learning benchmark's."""


@pytest.mark.parametrize(
    "path",
    sorted(path for folder in READY_MADE for path in (REPO / folder).glob("*.toml")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_ready_made_task_files_load(path):
    task = load_task(path)
    assert task.description
    if task.inputs_file is not None:  # fixed splits: both present
        rows = task.inputs_file.read_text().splitlines()
        assert any('"split": "train"' in row for row in rows) and any('"split": "val"' in row for row in rows)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'description = "x"\nnum_input = 3',
            r"unknown field 'num_input' \(known fields: description, .*tools, inputs_file, backend, keep_checkpoints, train, trainer, cluster, sentinel\)",
        ),
        ('description = "x"\nnum_inputs = "many"', r"field 'num_inputs': Input should be a valid integer.*'many'"),
        ('description = "x"\nnum_inputs = 0', r"field 'num_inputs': Input should be greater than 0"),
        ('description = "x"\nseed_examples = "one"', r"field 'seed_examples': Input should be a valid list"),
        ("num_inputs = 3", r"field 'description' is required"),
        ('description = "   "', r"field 'description': must not be empty"),
        ('description = "x"\n[[tools]]\nname = "a b"', r"field 'tools\[0\]\.name': String should match pattern"),
        (
            'description = "x"\n[[tools]]\nname = "t"\nargs = 1',
            r"unknown field 'tools\[0\]\.args' \(known fields: name,",
        ),
        (
            'description = "x"\n[[tools]]\nname = "t"\nparameters = { type = "string" }',
            r"field 'tools\[0\]\.parameters': must be a JSON schema with type = \"object\"",
        ),
        ("description = x", r"is not valid TOML: .*line 1"),
    ],
)
def test_malformed_task_file_names_the_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(AutoRLError, match=message) as error:
        load_task(path)
    assert str(error.value).startswith(f"task file {path}")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("task", ["", "   \n"])
def test_empty_task_is_rejected(task):
    with pytest.raises(AutoRLError, match="the task is empty"):
        load_task(task)


def test_missing_task_file_is_reported(tmp_path):
    with pytest.raises(AutoRLError, match=r"task file not found: .*nope\.toml"):
        load_task(str(tmp_path / "nope.toml"))


def test_docs_describe_every_field_and_their_example_loads(tmp_path):
    docs = "\n".join(page.read_text() for page in pages())
    for field in [*TaskSpec.model_fields, *ToolSpec.model_fields]:
        assert f"`{field}`" in docs, field
    example = marked_block(DOCS / "inputs.md", "tests/test_task.py", after="## Task files")
    task = load_task(write(tmp_path, example))
    # the run settings have their own example (tests/test_run_config.py)
    assert set(task.model_fields_set) == set(TaskSpec.model_fields) - RUN_SETTINGS


def test_run_settings_load_as_given_and_the_inputs_file_is_relative_to_the_task_file(tmp_path):
    (tmp_path / "tasks").mkdir()
    path = write(
        tmp_path / "tasks",
        'description = "x"\ninputs_file = "data/in.jsonl"\n[train]\nloss = "gspo"\n[trainer]\nlora_rank = 4\n',
    )
    task = load_task(str(path))
    assert task.train == {"loss": "gspo"} and task.trainer == {"lora_rank": 4}  # only what the file sets
    assert task.inputs_file == tmp_path / "tasks" / "data" / "in.jsonl"
    absolute = tmp_path / "elsewhere.jsonl"
    assert load_task(write(tmp_path, f'description = "x"\ninputs_file = "{absolute}"\n')).inputs_file == absolute
    with pytest.raises(AutoRLError, match=r"field 'train': Input should be a valid dictionary"):
        load_task(write(tmp_path, 'description = "x"\ntrain = 3\n'))
