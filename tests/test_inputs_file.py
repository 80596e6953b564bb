"""`--inputs-file`: the user's inputs instead of generated ones, deduplicated and split as generated ones are."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from autorl.errors import AutoRLError
from autorl.inputs.dedup import DEFAULT_VAL_FRACTION, split_train_val
from autorl.inputs.files import GeneratedInput, inputs_from_file, read_input_rows, write_inputs_jsonl
from autorl.task import TaskSpec
from pipelines.artifacts import ArtifactStore
from pipelines.config import RunConfig
from pipelines.records import inputs as records
from pipelines.staged_run import stage_keys
from pipelines.stages import inputs as stage

TASK = TaskSpec(description="Answer questions about the capitals of countries")
QUESTIONS = ["What is the capital of Peru?", "Which city hosts the government of Canada?",
             "Name the largest city in Australia and say whether it is the capital.",
             "Is Bern really the Swiss capital, or is it Zurich?", "Tell me about Ulaanbaatar.",
             "My kid asks why Brasilia was built. Explain simply.", "Capital of Kenya?",
             "List three capitals that lie on a river.", "Which capital is the highest above sea level?",
             "Was Kyoto ever the capital of Japan?"]  # fmt: skip


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_rows_without_a_split_are_split_like_generated_inputs(tmp_path):
    texts = ["Where is Paris located on a map?", "How tall is the Eiffel tower?", "Name a river in Spain, please.",
             "What is the population of Lisbon?", "Which sea borders Croatia?", "Is Oslo north of Stockholm?"]  # fmt: skip
    path = write_rows(tmp_path / "in.jsonl", [{"input": f"  {t} ", "source": "forum"} for t in texts])
    result = inputs_from_file(path, seed=3)
    assert [row.input for row in result.inputs] == texts  # stripped, other fields ignored
    assert [row.split for row in result.inputs] == split_train_val(texts, DEFAULT_VAL_FRACTION, 3)
    assert result.val and result.train and result.stats.calls == 0
    assert [row.split for row in inputs_from_file(path, seed=4).inputs] == split_train_val(
        texts, DEFAULT_VAL_FRACTION, 4
    )


def test_a_given_split_is_kept_and_exact_duplicates_are_dropped(tmp_path):
    rows = [{"input": QUESTIONS[0], "split": "val"}, {"input": QUESTIONS[1], "split": "train"}, "",
            {"input": QUESTIONS[0].upper(), "split": "train"},  # an exact duplicate after normalization
            {"input": QUESTIONS[2]}, {"input": QUESTIONS[3]},
            {"input": "What is the opposite of up?"}, {"input": "What is the opposite of hot?"}]  # fmt: skip
    result = inputs_from_file(write_rows(tmp_path / "in.jsonl", rows))
    assert [row.split for row in result.inputs][:2] == ["val", "train"]
    assert [row.input for row in result.inputs] == [
        *QUESTIONS[:4],
        "What is the opposite of up?",
        "What is the opposite of hot?",
    ]
    assert (result.stats.raw, result.stats.duplicates, result.stats.unique) == (7, 1, 6)  # near-duplicates stay


def test_a_file_that_autorl_inputs_wrote_reads_back(tmp_path):
    rows = [GeneratedInput(input=text, split=split, difficulty="easy", generator="g", prompt_hash="0", attempt=1)
            for text, split in zip(QUESTIONS[:3], ["train", "val", "train"], strict=False)]  # fmt: skip
    path = write_inputs_jsonl(rows, tmp_path / "generated.jsonl")
    assert [(row.input, row.split) for row in inputs_from_file(path).inputs] == [(r.input, r.split) for r in rows]
    assert [tuple(row) for row in read_input_rows(path)] == [(r.input, r.split) for r in rows]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"input": "What is the capital of Peru?"}', "{not json"], r"in.jsonl:2: not valid JSON \("),
        (
            ['{"text": "What is the capital of Peru?"}'],
            r'in.jsonl:1: expected a JSON object with a non-empty string field "input"',
        ),
        (['{"input": 3}'], r'in.jsonl:1: expected a JSON object with a non-empty string field "input"'),
        (['["What is the capital of Peru?"]'], r"in.jsonl:1: expected a JSON object"),
        (
            ['{"input": "What is the capital of Peru?", "split": "test"}'],
            r"in.jsonl:1: \"split\" must be \"train\" or \"val\", got 'test'",
        ),
        (["", "  "], r"inputs file .*in.jsonl has no inputs"),
        (
            [json.dumps({"input": q, "split": "train"}) for q in QUESTIONS[:3]],
            r"in.jsonl: 3 train and 0 validation inputs",
        ),
        (
            [json.dumps({"input": q, "split": "val"}) for q in QUESTIONS[:3]],
            r"in.jsonl: 0 train and 3 validation inputs",
        ),
        ([json.dumps({"input": QUESTIONS[0]})], r"in.jsonl: 1 train and 0 validation inputs"),
    ],
)
def test_a_bad_inputs_file_is_one_line_naming_the_file_and_line(tmp_path, lines, message):
    with pytest.raises(AutoRLError, match=message) as error:
        inputs_from_file(write_rows(tmp_path / "in.jsonl", lines))
    assert "\n" not in str(error.value) and str(tmp_path / "in.jsonl") in str(error.value)


def test_a_missing_inputs_file_is_one_line_from_the_command(tmp_path):
    from typer.testing import CliRunner

    from pipelines.cli import app

    missing = tmp_path / "missing.jsonl"
    result = CliRunner().invoke(app, ["run", TASK.description, "--inputs-file", str(missing), "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == f"error: inputs file {missing} does not exist"


def test_the_inputs_key_covers_the_files_content_and_the_split_not_its_path_or_the_generator(tmp_path):
    path = write_rows(tmp_path / "in.jsonl", [{"input": q} for q in QUESTIONS])

    def key(**config) -> str:
        return stage_keys(TASK, RunConfig(**{"inputs_file": path, **config}))["inputs"]

    base = key()
    moved = shutil.copy(path, tmp_path / "moved.jsonl")
    assert key(inputs_file=moved) == base
    assert key(generator="openai/gpt-4.1-mini", num_inputs=50) == base
    assert key(seed=1) != base
    write_rows(path, [{"input": q} for q in QUESTIONS[:-1]])
    assert key() != base
    assert stage_keys(TASK, RunConfig())["inputs"] != base
    keys = stage_keys(TASK, RunConfig(inputs_file=moved))
    # still generated, and checked on the inputs (upstream): their new content makes a new key
    assert keys["system_prompt"] != stage_keys(TASK, RunConfig())["system_prompt"]


def test_the_inputs_stage_reads_the_file_without_a_model_call(tmp_path):
    path = write_rows(tmp_path / "in.jsonl", [{"input": q} for q in QUESTIONS] + [{"input": QUESTIONS[0]}])
    config = RunConfig(inputs_file=path, generator="nowhere@http://127.0.0.1:9/v1")
    ctx = SimpleNamespace(task=TASK, config=config, store=ArtifactStore(tmp_path / "artifacts"), keys={"inputs": "k"},
                          policy=None, calls=Counter(), generator_calls=[], console=Console())  # fmt: skip
    ctx.artifact = lambda name: ctx.store.path(name, ctx.keys[name])
    summary = asyncio.run(stage.run(ctx))
    assert summary["generator_calls"] == 0 and sum(ctx.calls.values()) == 0
    assert (summary["inputs"], summary["train"], summary["val"]) == (10, 8, 2)
    assert sorted(records.load(ctx, "train") + records.load(ctx, "val")) == sorted(QUESTIONS)
    assert json.loads((ctx.artifact("inputs") / records.FILE).read_text().splitlines()[0]).keys() == {"input", "split"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (bytes(range(128, 256)), r"inputs file .*in.jsonl cannot be read: 'utf-8' codec can't decode"),
        (b'{"input": "What is 2+2?"}\n{"input": "What is', r"in.jsonl:2: not valid JSON \(Unterminated string"),
    ],
    ids=["binary", "truncated"],
)
def test_a_binary_or_truncated_inputs_file_is_one_line(tmp_path, content, message):
    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    with pytest.raises(AutoRLError, match=message) as error:
        inputs_from_file(path)
    assert "\n" not in str(error.value)
