"""The learning benchmark's tool-only fact task (benchmarks/perf/learning_tasks/directory.toml): its tool knows
extensions no model can, its inputs ask for people it knows, and its judge checks the answer against the tool."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import pytest

from autorl.agents.tools import Toolbox
from autorl.serving.embedded import TEMPLATES
from autorl.task import load_task
from benchmarks.perf.learning_tasks.directory import EMPLOYEES, extension, lookup_extension
from benchmarks.perf.learning_tasks.judges import directory

TASK = Path(__file__).resolve().parents[2] / "benchmarks" / "perf" / "learning_tasks" / "directory.toml"
OVER_MCP = TASK.with_name("directory_mcp.toml")
"""The same task with the tool from a stdio MCP server (directory_server.py)."""
QUESTION = "What is the phone extension of Ada Park?"
RIGHT = extension("Ada Park")


def conversation(*turns: dict) -> list[dict]:
    return [{"role": "system", "content": "task"}, {"role": "user", "content": QUESTION}, *turns]


def looked_up(name: str, result: str) -> list[dict]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup_extension", "arguments": json.dumps({"name": name})},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]


def test_the_tool_answers_for_people_it_knows_and_refuses_others():
    assert lookup_extension("ada  PARK") == f"Ada Park: extension {RIGHT}"
    assert len({extension(name) for name in EMPLOYEES}) == len(EMPLOYEES)  # no two people share one
    assert all(1000 <= extension(name) <= 9999 for name in EMPLOYEES) and extension("Ada") is None
    with pytest.raises(ValueError, match="no employee named 'Ada'"):
        lookup_extension("Ada")


def test_the_task_is_its_text_and_one_tool_and_every_input_asks_for_someone_the_tool_knows():
    task = load_task(TASK)
    assert task.system_prompt is None and [tool.name for tool in task.tools] == ["lookup_extension"]
    assert task.max_turns <= 3
    rows = [json.loads(line) for line in (TASK.parent / task.inputs_file).read_text().splitlines()]
    assert (len(rows), sum(row["split"] == "val" for row in rows)) == (40, 16)
    assert all(sum(name in row["input"] for name in EMPLOYEES) == 1 for row in rows)
    assert not any(str(extension(name)) in row["input"] for row in rows for name in EMPLOYEES)


def test_the_task_s_tool_runs_through_the_toolbox():
    async def call() -> str:
        async with await Toolbox.open(load_task(TASK)) as toolbox:
            assert toolbox.openai_tools()[0]["function"]["parameters"]["required"] == ["name"]
            return (await toolbox.call("lookup_extension", '{"name": "Ada Park"}')).text

    assert asyncio.run(call()) == f"Ada Park: extension {RIGHT}"


def test_over_mcp_the_task_offers_the_same_tool_and_its_answers():
    """directory_mcp.toml differs from directory.toml only in how the tool reaches the agent: the same text and
    inputs, a tool of the same name, description and argument, which answers and refuses as the function does
    (through a real stdio MCP server)."""
    task, over_mcp = load_task(TASK), load_task(OVER_MCP)
    assert (over_mcp.description, over_mcp.inputs_file, over_mcp.max_turns) == (
        task.description,
        task.inputs_file,
        task.max_turns,
    )

    async def offered(spec) -> tuple[dict, str, str]:
        async with await Toolbox.open(spec) as toolbox:
            (tool,) = toolbox.openai_tools()
            found = await toolbox.call("lookup_extension", '{"name": "Ada Park"}')
            refused = await toolbox.call("lookup_extension", '{"name": "Ada"}')
            return tool["function"], found.text, refused.text

    function, found, refused = asyncio.run(offered(task))
    mcp_function, mcp_found, mcp_refused = asyncio.run(offered(over_mcp))
    assert (mcp_function["name"], mcp_function["description"]) == (function["name"], function["description"])
    argument = mcp_function["parameters"]["properties"]["name"]
    assert (argument["type"], argument["description"]) == (
        "string",
        function["parameters"]["properties"]["name"]["description"],
    )
    assert mcp_function["parameters"]["required"] == ["name"]
    assert mcp_found == found == f"Ada Park: extension {RIGHT}"
    assert refused.startswith("error:") and mcp_refused.startswith("error:")
    assert "no employee named 'Ada'" in refused and "no employee named 'Ada'" in mcp_refused


def test_the_task_text_the_tool_and_the_call_format_reach_the_model_through_the_embedded_template(tokenizer):
    """From the task text alone: the system turn the embedded model sees holds the text, the tool's schema and
    how to call it (autorl's template; SmolLM2's own has no tools)."""
    task = load_task(TASK)

    async def tools() -> list[dict]:
        async with await Toolbox.open(task) as toolbox:
            return toolbox.openai_tools()

    tokenizer = copy.copy(tokenizer)
    tokenizer.chat_template = (TEMPLATES / "smollm2_tools.jinja").read_text()
    messages = [{"role": "system", "content": task.description}, {"role": "user", "content": QUESTION}]
    prompt = tokenizer.apply_chat_template(
        messages, tools=asyncio.run(tools()), tokenize=False, add_generation_prompt=True
    )
    system = prompt.split("<|im_end|>")[0]
    assert task.description in system and '"name": "lookup_extension"' in system
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in system
    assert not any(name in system for name in EMPLOYEES)  # no worked call: the tool's example name is nobody's


@pytest.mark.parametrize(
    "turns, score",
    [
        (
            [
                *looked_up("Ada Park", f"Ada Park: extension {RIGHT}"),
                {"role": "assistant", "content": f"It is {RIGHT}."},
            ],
            1.0,
        ),
        ([{"role": "assistant", "content": f"Ada Park's extension is {RIGHT}."}], 1.0),  # right: it cannot be guessed
        ([*looked_up("Ada Park", f"Ada Park: extension {RIGHT}"), {"role": "assistant", "content": "Found it."}], 0.5),
        (
            [
                *looked_up("Ada Park", f"Ada Park: extension {RIGHT}"),
                {"role": "assistant", "content": f"{RIGHT} or 1234"},
            ],
            0.5,
        ),
        # the tool called with another name: 0.25, and more the nearer the name is to the asked one
        ([*looked_up("Bruno Vela", f"Bruno Vela: extension {extension('Bruno Vela')}")], 0.2722),  # another person
        ([*looked_up("lookup_extension", "error: ... no employee named 'lookup_extension'")], 0.2667),
        ([*looked_up("Ada", "error: 'lookup_extension' raised ValueError: no employee named 'Ada'")], 0.3591),
        ([*looked_up("AdaPark", "error: 'lookup_extension' raised ValueError: no employee named 'AdaPark'")], 0.4367),
        ([{"role": "assistant", "content": "I would use lookup_extension for that."}], 0.1),  # named, not called
        ([{"role": "assistant", "content": '<tool_call>{"name": "lookup"}'}], 0.1),  # a call that was not read
        ([{"role": "assistant", "content": "Her extension is 1234."}], 0.0),
        ([], 0.0),
    ],
)
def test_the_judge_checks_the_answer_against_the_tool_with_credit_for_the_right_call(turns, score):
    assert directory(conversation(*turns)) == score


def test_no_degenerate_answer_scores_above_naming_the_tool():
    """Answers that say nothing about the asked person: a constant number, every number the directory could
    hold, the question copied. The extensions cannot be guessed, so none scores."""
    for reply in ("1234", " ".join(str(n) for n in range(1000, 1100)), QUESTION):
        assert directory(conversation({"role": "assistant", "content": reply})) == 0.0
    assert directory([{"role": "user", "content": "What is the extension of Nobody Here?"}]) == 0.0


def test_a_constant_call_scores_far_below_what_training_reached():
    """A policy that calls the tool with one name whatever is asked, and relays what it returns, earns the
    partial credit of a call (0.25 and up to 0.2 more by name likeness): above the base model's ~0, so the judge
    can be gamed that far, and below every trained result of the learning benchmark's directory runs, which a
    constant therefore does not explain (their answers relay the asked person's extension)."""
    rows = [json.loads(line) for line in (TASK.parent / load_task(TASK).inputs_file).read_text().splitlines()]
    questions = [row["input"] for row in rows if row["split"] == "val"]

    def constant(name: str) -> float:
        result = lookup_extension(name)
        return sum(
            directory(
                [
                    {"role": "user", "content": question},
                    *looked_up(name, result),
                    {"role": "assistant", "content": result},
                ]
            )
            for question in questions
        ) / len(questions)

    best = max(constant(name) for name in EMPLOYEES)
    trained = [
        json.loads(path.read_text())["runs"][0]["trained"]["mean"]
        for path in (TASK.parents[1] / "results").glob("learning_tool_directory_nearer40_s[0-9].json")
    ]
    assert trained and 0.25 < best < min(trained) - 0.3, (best, trained)
