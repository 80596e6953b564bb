"""Input generation against a tiny fake OpenAI-compatible server on 127.0.0.1 (no model, seconds)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from autorl.errors import AutoRLError
from autorl.inputs.files import GeneratedInputs, read_inputs_jsonl, write_inputs_jsonl
from autorl.inputs.generation import INPUT_PREFILL, GenerationConfig, generate_inputs
from autorl.inputs.generator import Generator, InputGenerationError
from autorl.task import TaskSpec
from ruler.errors import ModelSpecError
from tests.helpers.chat_server import FakeOpenAIServer, Reply, is_prompt_request

TASK = TaskSpec(description="Solve grade-school math word problems; end with 'Answer: <number>'.")
SYSTEM_PROMPT = "You are a math tutor: solve word problems step by step and end with 'Answer: <number>'."
WORDS = [
    "apple",
    "river",
    "tiger",
    "violin",
    "copper",
    "meadow",
    "lantern",
    "pepper",
    "glacier",
    "orbit",
    "saddle",
    "thimble",
    "walnut",
    "ember",
]


"""Maps a chat-completions request body to the texts of its choices (one per `n`)."""


@pytest.fixture
def fake_server() -> Iterator[Callable[[Reply], FakeOpenAIServer]]:
    servers: list[FakeOpenAIServer] = []

    def start(reply: Reply) -> FakeOpenAIServer:
        servers.append(FakeOpenAIServer(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def quoted(text: str) -> str:
    """A prefilled input answer as the model writes it: the message, then the closing quote."""
    return f'{text}" and more the stop cuts off'


def scripted(batches: list[list[str]]) -> Reply:
    """System prompt requests get SYSTEM_PROMPT (after the prefill); input requests the next batch, each text an
    answer (quoted: the message then its closing quote; a text without a quote runs into the token cap)."""
    queue = iter(batches)

    def reply(body: dict) -> list[str]:
        if is_prompt_request(body):
            return [SYSTEM_PROMPT.removeprefix("You are") + "<eos>"]
        return next(queue)

    return reply


def random_words(body: dict) -> list[str]:
    """Inputs of random words drawn from the request's seed: distinct, and the same for the same seed."""
    if is_prompt_request(body):
        return [SYSTEM_PROMPT.removeprefix("You are") + "<eos>"]
    rng = random.Random(body["seed"])
    return [quoted(" ".join(rng.sample(WORDS, 6)) + "?") for _ in range(body["n"])]


def generate(server: FakeOpenAIServer, n: int, seed: int = 0, task: TaskSpec = TASK, **config) -> GeneratedInputs:
    generator = f"fake-model@{server.base_url}"
    return generate_inputs(task, n, generator=generator, seed=seed, config=GenerationConfig(**config))


def test_filters_dedups_splits_and_records_metadata(fake_server, tmp_path):
    server = fake_server(
        scripted([
            [quoted("How many legs do three spiders have?"), quoted("how many legs do THREE spiders have"),
             quoted("short"), "x" * 80],  # too short; cut off at the token cap (no closing quote)
            [],  # no answer at all
            [
                quoted("A train leaves at 3pm and travels 120 km at 60 km/h. When does it arrive?"),
                quoted("A train leaves at 4pm and travels 120 km at 60 km/h. When does it arrive?"),
                quoted("Write the number seven hundred and two in digits."),
                quoted("Is 91 a prime number?"),
            ],
            [quoted("What is 15% of 80?"), quoted("Sort these numbers: 5, 3, 9, 1."), quoted("Is 91 a prime number?"),
             quoted("how many wheels do 4 bicycles have")],
        ])
    )  # fmt: skip
    task = TASK.model_copy(update={"seed_examples": ["How many wheels do 4 bicycles have?"]})
    result = generate(server, n=5, task=task, samples_per_call=4, concurrency=1, max_chars=80, val_fraction=0.2)

    assert result.system_prompt == SYSTEM_PROMPT
    assert [row.input for row in result.inputs] == [
        "How many legs do three spiders have?",
        "A train leaves at 3pm and travels 120 km at 60 km/h. When does it arrive?",
        "Write the number seven hundred and two in digits.",
        "Is 91 a prime number?",
        "What is 15% of 80?",
    ]
    stats = result.stats
    assert (stats.calls, stats.unusable_calls, stats.raw, stats.rejected) == (4, 1, 12, 2)
    assert (stats.duplicates, stats.unique) == (4, 6)  # the last one copies the seed example
    assert stats.duplicate_rate == pytest.approx(4 / 10)
    assert [row.attempt for row in result.inputs] == [1, 3, 3, 3, 4]
    assert [row.difficulty for row in result.inputs] == ["easy", "hard", "hard", "hard", "easy"]
    assert {row.generator for row in result.inputs} == {"fake-model"}
    assert result.inputs[1].prompt_hash == result.inputs[2].prompt_hash != result.inputs[0].prompt_hash
    assert [row.split for row in result.inputs].count("val") == 1
    assert sorted(result.train + result.val) == sorted(row.input for row in result.inputs)

    # Every input request asked for 4 answers with its own seed, continuing the prefill up to the closing
    # quote (a name@URL endpoint is taken for vLLM), and showed the seed example; every one is recorded.
    calls = server.input_requests()
    assert {call["n"] for call in calls} == {4} and len({call["seed"] for call in calls}) == 4
    assert calls[0]["messages"][-1] == {"role": "assistant", "content": INPUT_PREFILL}
    assert (calls[0]["continue_final_message"], calls[0]["add_generation_prompt"], calls[0]["stop"]) == (
        True,
        False,
        ['"'],
    )
    assert "How many wheels do 4 bicycles have?" in calls[0]["messages"][0]["content"]
    assert "unusual" in calls[2]["messages"][0]["content"] and "unusual" not in calls[0]["messages"][0]["content"]
    assert len(result.calls) == 5 and {c.model for c in result.calls} == {"fake-model"}  # the system prompt's too
    assert [c.completion_tokens for c in result.calls] == [2, 8, 0, 8, 8] and {c.outcome for c in result.calls} == {
        "ok"
    }

    path = write_inputs_jsonl(result.inputs, tmp_path / "out" / "inputs.jsonl")
    frame = pd.read_json(path, lines=True)
    assert list(frame.columns) == ["input", "split", "difficulty", "generator", "prompt_hash", "attempt"]
    assert frame["input"].tolist() == [row.input for row in result.inputs]
    assert read_inputs_jsonl(path) == result.inputs


def test_same_seed_same_inputs_and_split(fake_server):
    server = fake_server(random_words)
    first, again = generate(server, n=12, seed=7), generate(server, n=12, seed=7)
    other = generate(server, n=12, seed=8)
    assert first.inputs == again.inputs
    assert [row.input for row in first.inputs] != [row.input for row in other.inputs]
    assert len(first.train) == 10 and len(first.val) == 2
    assert not set(first.train) & set(first.val)


def test_generator_with_nothing_usable_fails_after_the_call_cap(fake_server):
    server = fake_server(scripted([[]] * 10))
    with pytest.raises(InputGenerationError, match=r"only 0 of 5 unique inputs after 3 generator calls \(3 empty"):
        generate(server, n=5, max_calls=3, concurrency=2)
    assert len(server.input_requests()) == 3


def test_generator_repeating_itself_fails_after_the_call_cap(fake_server):
    server = fake_server(scripted([[quoted("What is two plus two?")] * 5] * 10))
    with pytest.raises(InputGenerationError, match=r"only 1 of 3 unique inputs after 4 generator calls.*19 duplicates"):
        generate(server, n=3, max_calls=4)


def test_a_system_prompt_cut_off_in_every_try_falls_back_with_that_reason(fake_server):
    server = fake_server(lambda body: ["an endless prompt"] if is_prompt_request(body) else random_words(body))
    result = generate(server, n=5)
    assert (result.system_prompt, result.system_prompt_fallback) == (TASK.description, "cut off at the token cap")
    assert len(server.requests) - len(server.input_requests()) == 3


@pytest.mark.parametrize("n", [0, -3])
def test_non_positive_n_is_rejected(n):
    with pytest.raises(AutoRLError, match=f"at least 1, got {n}"):
        generate_inputs(TASK, n, generator="never-called")


def test_generator_forms_and_where_a_prefill_is_sent():
    served = Generator("Qwen/Qwen3-8B@http://127.0.0.1:8000/v1")
    assert (served.target().model, served.target().api_base, served.name, served.prefill) == (
        "openai/Qwen/Qwen3-8B",
        "http://127.0.0.1:8000/v1",
        "Qwen/Qwen3-8B",
        True,
    )
    provider = Generator("openai/gpt-4.1-mini")
    assert (provider.target().model, provider.name, provider.prefill) == (
        "openai/gpt-4.1-mini",
        "openai/gpt-4.1-mini",
        False,
    )
    assert (
        Generator("openai/gpt-4.1-mini", prefill=True).prefill and not Generator("m@http://h/v1", prefill=False).prefill
    )
    with pytest.raises(ModelSpecError, match="names no model; use 'provider/model'"):
        Generator("@http://127.0.0.1:8000/v1")


def test_without_a_prefill_the_whole_answer_is_the_input(fake_server):
    server = fake_server(
        lambda body: [SYSTEM_PROMPT + "<eos>"] if is_prompt_request(body) else ['"Is 91 a prime number?"<eos>']
    )
    config = GenerationConfig(prefill=False, samples_per_call=1, max_calls=2)
    result = generate_inputs(TASK, 1, generator=f"m@{server.base_url}", config=config)
    assert result.system_prompt == SYSTEM_PROMPT and [row.input for row in result.inputs] == ["Is 91 a prime number?"]
    assert all(request["messages"][-1]["role"] == "user" and "stop" not in request for request in server.requests)


def test_default_call_cap_scales_with_n():
    config = GenerationConfig(samples_per_call=4)
    assert config.calls_allowed(5) == 16
    assert config.calls_allowed(100) == 100
    assert GenerationConfig(max_calls=3).calls_allowed(100) == 3


def test_cli_prints_a_table_and_writes_the_inputs(fake_server, tmp_path):
    from typer.testing import CliRunner

    from pipelines.cli import app

    server = fake_server(random_words)
    out = tmp_path / "inputs.jsonl"
    command = ["inputs", TASK.description, "-n", "6", "--out", str(out), "--generator", f"fake@{server.base_url}"]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "system prompt" in result.output and "difficulty" in result.output
    frame = pd.read_json(out, lines=True)
    assert len(frame) == 6 and set(frame["split"]) == {"train", "val"}
    assert out.with_suffix(".system_prompt.txt").read_text().strip() == SYSTEM_PROMPT
    assert frame["input"].iloc[0].split()[0] in result.output


def test_cli_shows_the_generator_the_task_tools_as_the_inputs_stage_does(fake_server, tmp_path):
    """`autorl inputs` on a task with a tool makes the inputs `autorl run` makes: its requests describe the tool
    (`stages.inputs.with_tools_shown`), so the inputs it prints are the ones that need it."""
    from typer.testing import CliRunner

    from pipelines.cli import app
    from pipelines.stages.inputs import TOOLS_INSTRUCTIONS

    server = fake_server(random_words)
    task = Path(__file__).resolve().parents[1] / "pipelines" / "tasks" / "unit_conversion_tool.toml"
    out = tmp_path / "inputs.jsonl"
    command = ["inputs", str(task), "-n", "3", "--out", str(out), "--generator", f"fake@{server.base_url}"]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    asked = [str(m["content"]) for r in server.input_requests() for m in r["messages"]]
    assert any(TOOLS_INSTRUCTIONS in text and "- convert:" in text for text in asked)
    assert len(pd.read_json(out, lines=True)) == 3


JUNK = ["example 1", "guidance", "new_input6", "customers_requested_urgent_requests", TASK.description, "<new input>"]
REAL = ["Convert 5 km to miles", "hey can u send the report", "Is 91 a prime number?", "What is 15% of 80?"]


def test_junk_inputs_are_rejected_and_counted(fake_server):
    server = fake_server(scripted([[quoted(t) for t in JUNK[:3] + REAL[:2]], [quoted(t) for t in JUNK[3:] + REAL[2:]]]))
    result = generate(server, n=4, samples_per_call=5, concurrency=1)
    assert [row.input for row in result.inputs] == REAL
    stats = result.stats
    assert (stats.raw, stats.rejected, stats.rejected_junk, stats.duplicates, stats.unique) == (10, 0, 6, 0, 4)
    assert stats.duplicate_rate == 0


def test_only_junk_fails_with_the_junk_count(fake_server):
    server = fake_server(scripted([[quoted("example 1"), quoted("example 2"), quoted("guidance")]] * 3))
    with pytest.raises(InputGenerationError, match="9 junk inputs"):
        generate(server, n=2, samples_per_call=3, max_calls=3)


def system_prompts(*prompts: str) -> Reply:
    """System prompt requests get `prompts` in turn (the last one repeated), each the continuation of the prefill
    "You are"; input requests random words."""
    queue = list(prompts)

    def reply(body: dict) -> list[str]:
        if is_prompt_request(body):
            return [(queue.pop(0) if len(queue) > 1 else queue[0]) + "<eos>"]
        return random_words(body)

    return reply


NOISE = "## ## system prompt prompt ## ## " * 50


def test_unusable_system_prompt_falls_back_to_the_task_description(fake_server, caplog):
    server = fake_server(system_prompts(NOISE[:1400]))
    with caplog.at_level("WARNING", logger="autorl.inputs.generation"):
        result = generate(server, n=3)
    assert result.system_prompt == TASK.description
    assert result.system_prompt_fallback is not None and "repetition loop" in result.system_prompt_fallback
    assert "using the task description" in caplog.text
    assert len(server.requests) - len(server.input_requests()) == 3  # every try was made


def test_a_later_try_that_passes_is_used(fake_server):
    server = fake_server(system_prompts(" a helpful assistant. Be polite and friendly to all.", SYSTEM_PROMPT[7:]))
    result = generate(server, n=3)
    assert (result.system_prompt, result.system_prompt_fallback) == (SYSTEM_PROMPT, None)


def test_cli_reports_junk_and_a_fallback(fake_server, tmp_path):
    from typer.testing import CliRunner

    from pipelines.cli import app

    server = fake_server(system_prompts(" a helpful assistant. Be polite and friendly to all."))
    out = tmp_path / "inputs.jsonl"
    command = ["inputs", TASK.description, "-n", "3", "--out", str(out), "--generator", f"fake@{server.base_url}"]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "0 junk rejected" in " ".join(result.output.split())
    assert "system prompt unusable (unrelated to the task" in " ".join(result.output.split())
    assert out.with_suffix(".system_prompt.txt").read_text().strip() == TASK.description


def stage_context(server: FakeOpenAIServer, tmp_path, **config):
    from types import SimpleNamespace

    from rich.console import Console

    from pipelines.artifacts import ArtifactStore

    console = Console(record=True, width=200)
    run_config = SimpleNamespace(
        **{"generator": f"fake@{server.base_url}", "seed": 0, "num_inputs": None, "inputs_file": None, **config}
    )
    keys = {"inputs": "k-inputs", "system_prompt": "k-prompt"}
    return SimpleNamespace(
        task=TASK,
        config=run_config,
        store=ArtifactStore(tmp_path),
        keys=keys,
        console=console,
        calls=Counter(),
        generator_calls=[],
    )


def test_with_the_check_off_the_task_text_is_the_system_prompt_and_nothing_is_generated(fake_server, tmp_path):
    import asyncio

    from pipelines.records import system_prompt as records
    from pipelines.stages import system_prompt as stage

    server = fake_server(system_prompts(SYSTEM_PROMPT[7:]))
    ctx = stage_context(server, tmp_path, system_prompt_check=0)
    ctx.artifact = lambda name: ctx.store.path(name, ctx.keys[name])
    summary = asyncio.run(stage.run(ctx))
    assert summary["fallback"] is None and summary["generator_calls"] == 0 and server.requests == []
    assert records.load(ctx) == TASK.description
    assert ctx.console.export_text().strip() == (
        "system_prompt: the task text is the system prompt, no other prompt was checked: the check is off "
        "(--system-prompt-check 0)"
    )


def test_inputs_stage_summary_counts_junk(fake_server, tmp_path):
    import asyncio

    from pipelines.stages import inputs as stage

    batches = [[quoted(t) for t in JUNK[:3] + REAL[:2]], [quoted(t) for t in JUNK[3:] + REAL[2:]]]
    ctx = stage_context(fake_server(scripted(batches)), tmp_path, num_inputs=4)
    summary = asyncio.run(stage.run(ctx))
    assert summary["rejected_junk"] == 6 and summary["inputs"] == 4


def test_a_failed_generator_attempt_records_its_own_seconds_not_the_back_off_after_it(monkeypatch):
    """The first request's connection is dropped (a retryable failure), the second answered: the failed
    attempt's record holds the seconds it took, and the back-off before the retry is in neither record."""
    from autorl.inputs import generator
    from ruler.retry import RetryPolicy
    from tests.helpers.chat_server import ChatCompletionServer, completion

    monkeypatch.setattr(generator, "RETRY", RetryPolicy(max_attempts=2, initial_backoff_s=0.5, jitter=0))
    seen = []

    def answer(body: dict) -> dict:
        seen.append(body)
        if len(seen) == 1:
            raise ConnectionResetError("dropped")  # the handler dies: the client sees the connection end
        return completion(body, "Hello")

    server = ChatCompletionServer(answer)
    try:
        client = Generator(f"fake@{server.base_url}")
        assert [a.text for a in client.complete([{"role": "user", "content": "hi"}], None, n=1, seed=0)] == ["Hello"]
    finally:
        server.close()
    failed, ok = client.calls
    assert failed.outcome != "ok" and ok.outcome == "ok"
    assert ok.started - (failed.started + failed.seconds) >= 0.5  # the back-off lies between the two records
