"""MCP•RL scenarios (`autorl.mcp.generate_scenarios`, ART's `art.mcp`) and a run's inputs taken from them
(`autorl.inputs.scenarios`), against a real stdio MCP server (benchmarks/perf/learning_tasks/offices_server.py:
two tools a question needs in sequence, one resource) and a scripted generator: a real HTTP server on 127.0.0.1
that speaks the OpenAI chat-completions API and answers canned JSON (no model, seconds)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import autorl as art
from autorl.agents.tools import Toolbox
from autorl.inputs.files import GeneratedInputs
from autorl.inputs.generation import GenerationConfig
from autorl.inputs.scenarios import SCENARIOS_PER_CALL, SOURCE, difficulties, generate_scenario_inputs
from autorl.mcp import GeneratedScenario, GeneratedScenarioCollection, MCPResource, MCPTool, complete_task_tool
from autorl.task import load_task
from pipelines.config import RunConfig
from pipelines.stages import inputs as inputs_stage
from tests.helpers.chat_server import ChatCompletionServer, completion, is_prompt_request, send_json

OFFICES = Path(__file__).resolve().parents[1] / "benchmarks" / "perf" / "learning_tasks" / "offices_mcp.toml"
TOOLS = [MCPTool("find_employee", "Find an employee's id by name.", {"type": "object"})]
RESOURCES = [MCPResource("staff://names", "staff", "Everyone in the company.", "text/plain")]
SYSTEM_PROMPT = "You are an office finder: call find_employee, then get_office, then give the office."


NAMES = ["Ada Park", "Bruno Vela", "Carmen Holt", "Dario Finch", "Elena Marsh", "Farid Osei", "Greta Lund"]
WORDS = [
    "parcel",
    "meeting",
    "invoice",
    "badge",
    "laptop",
    "keys",
    "printer",
    "visitor",
    "lunch",
    "contract",
    "chair",
    "plant",
    "poster",
    "cable",
]


def scenarios_json(count: int, start: int = 0, difficulty: int | None = None) -> str:
    """An answer of `count` distinct scenarios, number `start` on (difficulties cycling 1-5 unless one is given)."""
    tasks = [
        {
            "task": f"Where does {NAMES[n % len(NAMES)]} sit? I must bring them the "
            + " and the ".join(WORDS[(n * 5 + k * 3) % len(WORDS)] for k in range(3))
            + f" before {8 + n % 9} o'clock.",
            "difficulty": difficulty or 1 + n % 5,
        }
        for n in range(start, start + count)
    ]
    return json.dumps({"scenarios": tasks})


def asked_count(body: dict) -> int:
    """How many scenarios a request's schema asks for."""
    return body["response_format"]["json_schema"]["schema"]["properties"]["scenarios"]["minItems"]


class ScriptedGenerator(ChatCompletionServer):
    """Answers each request with the next of `script` (a text, or an HTTP status to fail with), then with
    `default(body)`; a system prompt request gets `SYSTEM_PROMPT`."""

    def __init__(self, script: list[str | int | None], default: Callable[[dict], str] | None = None):
        self.script = list(script)
        self.default = default or (lambda body: scenarios_json(asked_count(body), 100 * len(self.requests)))
        super().__init__(lambda body: {})

    def respond(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        if is_prompt_request(body):
            send_json(handler, 200, completion(body, SYSTEM_PROMPT.removeprefix("You are")))  # prefilled
            return
        step = self.script.pop(0) if self.script else self.default(body)
        if isinstance(step, int):
            send_json(handler, step, {"error": {"message": "busy", "type": "server_error"}})
            return
        reply = completion(body, "")
        reply["choices"][0]["message"]["content"] = step
        send_json(handler, 200, reply)

    def scenario_requests(self) -> list[dict]:
        return [body for body in self.requests if not is_prompt_request(body)]


@pytest.fixture
def generator() -> Iterator[Callable[..., ScriptedGenerator]]:
    servers: list[ScriptedGenerator] = []

    def start(script: list[str | int | None], default: Callable[[dict], str] | None = None) -> ScriptedGenerator:
        servers.append(ScriptedGenerator(script, default))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def scenarios(server: ScriptedGenerator, n: int = 3, **kwargs) -> GeneratedScenarioCollection:
    kwargs = {"generator_model": "gen", "generator_api_key": "k", "generator_base_url": server.base_url, **kwargs}
    return asyncio.run(art.mcp.generate_scenarios(TOOLS, RESOURCES, num_scenarios=n, **kwargs))


def test_generate_scenarios_asks_for_exactly_n_scenarios_by_a_json_schema_and_returns_them(generator, capsys):
    server = generator([scenarios_json(3)])
    collection = scenarios(server, custom_instructions="Only ask about the sales team.")
    assert [s.difficulty for s in collection] == [1, 2, 3] and collection[0].task.startswith("Where does Ada Park sit?")
    (body,) = server.requests
    assert body["model"] == "gen" and body["max_completion_tokens"] == 8000
    schema = body["response_format"]["json_schema"]["schema"]["properties"]["scenarios"]
    assert (schema["minItems"], schema["maxItems"], schema["items"]["required"]) == (3, 3, ["task", "difficulty"])
    prompt = body["messages"][0]["content"]
    assert "find_employee" in prompt and "staff://names" in prompt and "Only ask about the sales team." in prompt
    assert server.headers[0]["authorization"] == "Bearer k"
    shown = capsys.readouterr().out
    assert "Difficulty distribution:" in shown and "(difficulty 2/5)" in shown


@pytest.mark.parametrize(
    ("answer", "error", "says"),
    [
        (scenarios_json(2), ValueError, "Expected 3 scenarios, got 2"),
        (scenarios_json(3, difficulty=6), ValueError, "Difficulty must be an integer between 1 and 5"),
        ('{"scenarios": [{"task": "x", "difficulty": 1}', json.JSONDecodeError, "Expecting"),
        (None, ValueError, "content is None"),
        (json.dumps({"scenarios": [{"difficulty": 1}] * 3}), KeyError, "task"),
    ],
)
def test_an_answer_that_fails_arts_checks_raises_as_in_art_and_is_not_asked_again(generator, answer, error, says):
    server = generator([answer])
    with pytest.raises(error, match=says):
        scenarios(server)
    assert len(server.requests) == 1


def test_a_failed_request_is_retried_by_the_client_as_arts_is(generator):
    server = generator([503, scenarios_json(3)])
    assert len(scenarios(server, show_preview=False)) == 3
    assert len(server.requests) == 2


def test_what_art_refuses_before_any_request(generator, monkeypatch):
    server = generator([])
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENROUTER_API_KEY"):
        scenarios(server, generator_api_key=None)
    with pytest.raises(ValueError, match="At least one tool or resource"):
        asyncio.run(art.mcp.generate_scenarios([], [], generator_api_key="k", generator_base_url=server.base_url))
    assert server.requests == []


def test_the_types_keep_arts_helpers():
    collection = GeneratedScenarioCollection.from_json(scenarios_json(5))
    train, val = collection.split(4)
    assert (len(train), len(val)) == (4, 1) and len(collection.filter_by_difficulty(2, 3)) == 2
    assert GeneratedScenarioCollection.from_json(collection.to_json()).to_dicts() == collection.to_dicts()
    assert collection.get_summary()["avg_difficulty"] == 3 and collection.get_difficulty_distribution()[5] == 1
    with pytest.raises(ValueError, match="train_size"):
        collection.split(6)
    with pytest.raises(ValueError):
        GeneratedScenario("x", 0)
    assert MCPTool.from_dict({"name": "t", "inputSchema": {"type": "object"}}).parameters == {"type": "object"}
    assert MCPResource.from_dict({"uri": "a://b", "name": "b", "mimeType": "text/plain"}).to_dict()["mimeType"]
    assert complete_task_tool.to_tool_schema()["function"]["parameters"]["required"] == ["summary"]


def test_scenarios_from_a_real_stdio_mcp_server_list_its_tools_and_resource(generator):
    server = generator([scenarios_json(2)])

    async def scenario() -> GeneratedScenarioCollection:
        async with await Toolbox.open(load_task(OFFICES)) as toolbox:
            listed = [resource for mcp_server in toolbox.servers for resource in mcp_server.resources]
            kwargs = {"generator_model": "gen", "generator_api_key": "k", "generator_base_url": server.base_url}
            return await art.mcp.generate_scenarios(list(toolbox.tools.values()), listed, 2, False, **kwargs)

    collection = asyncio.run(scenario())
    assert len(collection) == 2
    prompt = server.requests[0]["messages"][0]["content"]
    assert '"name": "find_employee"' in prompt and '"name": "get_office"' in prompt and "staff://names" in prompt


def test_a_task_with_mcp_servers_and_no_inputs_file_takes_scenarios_as_its_inputs(generator):
    """The inputs stage's `generated`: requests of at most SCENARIOS_PER_CALL scenarios, each answer checked as
    ART checks its answer (an unusable one is asked again, with another seed), duplicates dropped; each input
    carries its difficulty, and the generator's name (never its address)."""
    task = load_task(OFFICES)
    n = SCENARIOS_PER_CALL + 4
    script = [scenarios_json(3), scenarios_json(8), "not json", scenarios_json(4, start=4)]  # wrong count, 8 kept,
    server = generator(script)  # unusable, 4 duplicates; then 4 new from the default answer

    async def scenario() -> GeneratedInputs:
        async with await Toolbox.open(task) as toolbox:
            config = GenerationConfig(concurrency=1)
            return await inputs_stage.generated(task, n, f"gen@{server.base_url}", 0, toolbox, config)

    result = asyncio.run(scenario())
    asked = server.scenario_requests()
    assert [asked_count(body) for body in asked] == [SCENARIOS_PER_CALL] * 2 + [4] * 3
    assert len({body["seed"] for body in asked}) == len(asked)
    prompt = asked[0]["messages"][0]["content"]
    assert "get_office" in prompt and "staff://names" in prompt and "Ada Park, Bruno Vela" in prompt
    assert "report of the results" not in prompt  # the task's description says what the answer is
    rows = result.inputs
    assert len(rows) == n and len({row.input for row in rows}) == n
    assert [row.difficulty for row in rows[:6]] == [1, 2, 3, 4, 5, 1]
    assert {row.generator for row in rows} == {"gen"} and {row.split for row in rows} == {"train", "val"}
    stats = result.stats
    assert (stats.calls, stats.unusable_calls, stats.duplicates, stats.unique) == (5, 2, 4, n)
    assert difficulties(rows) == {"1": 3, "2": 3, "3": 3, "4": 2, "5": 1}


def test_the_generator_that_never_answers_usably_ends_in_one_line(generator):
    from autorl.inputs.generator import InputGenerationError

    server = generator([], default=lambda body: scenarios_json(1))
    with pytest.raises(InputGenerationError, match="only 0 of 3 unique MCP•RL scenarios after 4 generator calls"):
        generate_scenario_inputs(load_task(OFFICES), TOOLS, RESOURCES, 3, f"gen@{server.base_url}")


def test_the_stage_key_covers_scenario_generation_only_for_a_task_with_mcp_servers():
    task = load_task(OFFICES)
    assert inputs_stage.settings(task, RunConfig())["inputs_from"]["source"] == SOURCE
    plain = task.model_copy(update={"mcp_servers": []})
    assert "inputs_from" not in inputs_stage.settings(plain, RunConfig())


def test_autorl_inputs_prints_the_scenarios_with_their_difficulty(generator, tmp_path):
    from typer.testing import CliRunner

    from pipelines.cli import app

    server = generator([])
    out = tmp_path / "inputs.jsonl"
    command = ["inputs", str(OFFICES), "-n", "4", "--out", str(out), "--generator", f"gen@{server.base_url}"]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(1 <= row["difficulty"] <= 5 for row in rows)
    assert out.with_suffix(".system_prompt.txt").read_text().strip() == SYSTEM_PROMPT


def test_the_report_says_the_inputs_are_scenarios_and_how_many_have_each_difficulty(tmp_path):
    from types import SimpleNamespace

    from autorl.inputs.files import GeneratedInput, write_inputs_jsonl
    from pipelines.records import inputs as inputs_record

    rows = [
        GeneratedInput(input=f"Where does {name} sit?", split=split, difficulty=level, generator="gen")
        for name, split, level in [("Ada Park", "train", 1), ("Nils Berg", "train", 3), ("Kira Novak", "val", 1)]
    ]
    write_inputs_jsonl(rows, tmp_path / "inputs" / inputs_record.FILE)
    run = SimpleNamespace(artifact=lambda stage: tmp_path / stage)
    section = "\n".join(inputs_record.section(run))
    assert section.startswith("## Inputs (2 train, 1 validation; a sample)")
    assert (
        "MCP•RL scenarios written by `gen`" in section
        and "difficulty (1: one tool call, to 5: many steps): 1: 2, 3: 1." in section
    )
    assert "- Nils Berg" not in section and "- Where does Nils Berg sit? (difficulty 3)" in section
    write_inputs_jsonl(
        [row.model_copy(update={"difficulty": None}) for row in rows], tmp_path / "inputs" / inputs_record.FILE
    )
    assert "MCP•RL" not in "\n".join(inputs_record.section(run))
