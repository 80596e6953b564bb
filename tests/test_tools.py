"""Tools from Python functions: schemas from signatures, calls, and every tool problem as an error text;
task-file fields of tools and MCP servers and their errors."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest

from autorl.agents.tool_schema import signature_schema
from autorl.agents.tools import Toolbox, load_function
from autorl.errors import AutoRLError
from autorl.task import McpServerSpec, TaskSpec, ToolSpec, load_task

REPO = Path(__file__).resolve().parents[1]

FUNCTIONS = '''
import asyncio, threading, time
from helper import OFFSET  # a module beside this file

CALLS = []

def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number,
            which defaults to 2.
    """
    return a + b + OFFSET

async def greet(name: str) -> str:
    await asyncio.sleep(0)
    return f"hello {name}"

def profile(name: str) -> dict:
    return {"name": name, "tags": ["a", "b"], "when": __import__("datetime").date(2024, 1, 2)}

def boom(reason: str) -> str:
    raise ValueError(reason)

def quit_() -> str:
    raise SystemExit(3)

MEETING = threading.Barrier(4, timeout=60)


def meet() -> str:
    """Return once four calls are in at the same time."""
    MEETING.wait()
    return "met"


def hang(seconds: float) -> str:
    time.sleep(seconds)
    CALLS.append(seconds)
    return "woke"

async def hang_async(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "woke"

class Box:
    def size(self) -> int:
        return 3

box = Box()
NOT_CALLABLE = 3
'''


@pytest.fixture
def functions(tmp_path: Path) -> Path:
    (tmp_path / "helper.py").write_text("OFFSET = 0\n")
    path = tmp_path / "functions.py"
    path.write_text(FUNCTIONS)
    return path


def tool(functions: Path, name: str, attribute: str | None = None, **fields: Any) -> ToolSpec:
    return ToolSpec(name=name, function=f"{functions}:{attribute or name}", **fields)


def run(coroutine):
    return asyncio.run(coroutine)


async def opened_calls(task: TaskSpec, *calls: tuple[str, str]) -> tuple[list[str], Toolbox]:
    async with await Toolbox.open(task) as toolbox:
        return [await toolbox.call(name, arguments) for name, arguments in calls], toolbox


# --- schemas from signatures and docstrings ---------------------------------------------------------


def test_schema_from_signature_and_google_docstring(functions):
    parameters, description = signature_schema(load_function(f"{functions}:add"))
    assert description == "Add two integers."
    assert parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first number."},
            "b": {"type": "integer", "description": "The second number, which defaults to 2.", "default": 2},
        },
        "required": ["a"],
        "additionalProperties": False,
    }


def test_schema_of_every_supported_hint_and_numpy_docstring():
    def search(
        query: str,
        mode: Literal["any", "all"] = "any",
        limit: int | None = None,
        tags: list[str] | None = None,
        weights: dict[str, float] | None = None,
        exact: bool = False,
        note: Annotated[str, "A free-text note."] = "",
        anything=None,
        **extra,
    ) -> list:
        """Search the store.

        More text that is not the summary.

        Parameters
        ----------
        query : str
            Words to look for.
        exact : bool
            Match whole words only.

        Returns
        -------
        list
            The hits.
        """

    parameters, description = signature_schema(search)
    assert description == "Search the store."
    assert parameters["required"] == ["query"]
    assert "additionalProperties" not in parameters  # **extra takes any other argument
    properties = parameters["properties"]
    assert properties["query"] == {"type": "string", "description": "Words to look for."}
    assert properties["mode"] == {"enum": ["any", "all"], "type": "string", "default": "any"}
    assert properties["limit"] == {"type": ["integer", "null"], "default": None}
    assert properties["tags"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    assert properties["weights"] == {
        "type": ["object", "null"],
        "additionalProperties": {"type": "number"},
        "default": None,
    }
    assert properties["exact"] == {"type": "boolean", "description": "Match whole words only.", "default": False}
    assert properties["note"] == {"type": "string", "description": "A free-text note.", "default": ""}
    assert properties["anything"] == {"default": None}


def test_a_hint_without_a_json_schema_is_refused():
    def f(when: time.struct_time) -> str:
        return ""

    with pytest.raises(TypeError, match="parameter 'when': type struct_time has no JSON schema"):
        signature_schema(f)


# --- calls ----------------------------------------------------------------------------------------------


def test_sync_and_async_functions_run_and_results_are_encoded(functions):
    task = TaskSpec(
        description="x",
        tools=[
            tool(functions, "add"),
            tool(functions, "greet"),
            tool(functions, "profile"),
            tool(functions, "size", "box.size"),
        ],
    )
    results, toolbox = run(
        opened_calls(
            task,
            ("add", '{"a": 1, "b": 5}'),
            ("add", '{"a": 1}'),
            ("greet", '{"name": "Ada"}'),
            ("profile", '{"name": "Ada"}'),
            ("size", ""),
        )
    )
    assert results == ["6", "3", "hello Ada", '{"name": "Ada", "tags": ["a", "b"], "when": "2024-01-02"}', "3"]
    assert toolbox.calls == {"ok": 5}
    entries = toolbox.openai_tools()
    assert [entry["function"]["name"] for entry in entries] == ["add", "greet", "profile", "size"]  # the task's order
    assert entries[0] == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": signature_schema(load_function(f"{functions}:add"))[0],
        },
    }


def test_every_tool_problem_is_an_error_text(functions):
    task = TaskSpec(
        description="x",
        tool_timeout_s=0.3,
        tools=[
            tool(functions, "add", description="Adds."),
            tool(functions, "boom"),
            tool(functions, "quit", "quit_"),
            tool(functions, "hang"),
            tool(functions, "hang_async"),
            ToolSpec(name="lookup", description="Only described."),
        ],
    )
    results, toolbox = run(
        opened_calls(
            task,
            ("nope", "{}"),
            ("add", '{"a": 1'),
            ("add", "[1, 2]"),
            ("add", '{"a": "one"}'),
            ("add", '{"b": 1}'),
            ("add", '{"a": 1, "c": 2}'),
            ("boom", '{"reason": "the disk is full"}'),
            ("quit", "{}"),
            ("hang", '{"seconds": 5}'),
            ("hang_async", '{"seconds": 5}'),
            ("lookup", "{}"),
        )
    )
    expected = [
        "error: unknown tool 'nope'; available: add, boom, quit, hang, hang_async, lookup",
        "error: the arguments of 'add' are not valid JSON (Expecting ',' delimiter: line 1 column 8 (char 7))",
        "error: the arguments of 'add' must be a JSON object, not list",
        "error: invalid arguments for 'add': 'one' is not of type 'integer' (at a)",
        "error: invalid arguments for 'add': 'a' is a required property",
        "error: invalid arguments for 'add': Additional properties are not allowed ('c' was unexpected)",
        "error: 'boom' raised ValueError: the disk is full",
        "error: 'quit' raised SystemExit: 3",
        "error: 'hang' did not finish within 0.3 s",
        "error: 'hang_async' did not finish within 0.3 s",
        "error: tool 'lookup' has no implementation (it is only described in the task)",
    ]
    assert results == expected
    assert toolbox.calls == {"error": len(expected)}


def test_a_long_error_is_shortened_to_one_line(functions):
    results, _ = run(
        opened_calls(
            TaskSpec(description="x", tools=[tool(functions, "boom")]), ("boom", json.dumps({"reason": "line\n" * 200}))
        )
    )
    assert len(results[0]) == 400 and "\n" not in results[0] and results[0].endswith("...")


def test_calls_run_concurrently_and_from_other_tasks(functions):
    task = TaskSpec(description="x", tool_timeout_s=120, tools=[tool(functions, "meet")])

    async def scenario():
        toolbox = await asyncio.create_task(Toolbox.open(task))
        results = await asyncio.gather(*(asyncio.create_task(toolbox.call("meet", "{}")) for _ in range(4)))
        await asyncio.create_task(toolbox.aclose())
        return results

    assert run(scenario()) == ["met"] * 4  # each call returns only once all four run at the same time


# --- loading functions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (
            "missing.py:f",
            r"tool 't': function '.*missing.py:f' cannot be loaded: FileNotFoundError: no file .*missing.py",
        ),
        ("{functions}:nothing", r"cannot be loaded: AttributeError: .*functions.py has no attribute 'nothing'"),
        ("{functions}:NOT_CALLABLE", r"cannot be loaded: TypeError: NOT_CALLABLE is a int, not a function"),
        ("{broken}:f", r"cannot be loaded: ZeroDivisionError: division by zero"),
        ("no_such_module_here:f", r"cannot be loaded: ModuleNotFoundError: No module named 'no_such_module_here'"),
        (
            "{typed}:f",
            r"tool 't': function .*: parameter 'x': type object has no JSON schema .*; give the tool's `parameters`",
        ),
    ],
)
def test_a_function_that_cannot_be_loaded_is_one_line_at_open(tmp_path, functions, function, message):
    (tmp_path / "broken.py").write_text("1 / 0\n")
    (tmp_path / "typed.py").write_text("def f(x: object) -> str:\n    return ''\n")
    spec = function.format(functions=functions, broken=tmp_path / "broken.py", typed=tmp_path / "typed.py")
    task = TaskSpec(description="x", tools=[ToolSpec(name="t", function=spec)])
    with pytest.raises(AutoRLError, match=message) as error:
        run(Toolbox.open(task))
    assert "\n" not in str(error.value)


def test_module_functions_load_and_given_parameters_are_kept():
    spec = ToolSpec(name="dumps", function="json:dumps", parameters={"type": "object", "properties": {"obj": {}}})
    results, toolbox = run(opened_calls(TaskSpec(description="x", tools=[spec]), ("dumps", '{"obj": [1]}')))
    assert results == ["[1]"]
    assert toolbox.openai_tools()[0]["function"]["parameters"] == spec.parameters
    assert toolbox.openai_tools()[0]["function"]["description"].startswith("Serialize ``obj``")  # its docstring


def test_two_tools_with_one_name_are_refused(functions):
    task = TaskSpec(description="x", tools=[tool(functions, "add"), tool(functions, "add", "greet")])
    with pytest.raises(
        AutoRLError, match=r"two tools are named 'add': from function .*functions.py:add and from function"
    ):
        run(Toolbox.open(task))


def test_describe_lists_names_descriptions_and_schemas(functions):
    toolbox = run(Toolbox.open(TaskSpec(description="x", tools=[tool(functions, "add"), ToolSpec(name="noop")])))
    text = toolbox.describe()
    assert text.splitlines()[:2] == ["Tools the agent can call:", "- add: Add two integers."]
    assert '"a": {"type": "integer", "description": "The first number."}' in text
    assert "- noop: (no description)" in text


# --- task files -----------------------------------------------------------------------------------------


def write(directory: Path, text: str) -> Path:
    path = directory / "task.toml"
    path.write_text(text)
    return path


def test_task_file_tools_servers_and_turns(tmp_path):
    (tmp_path / "tasks").mkdir()
    path = write(
        tmp_path / "tasks",
        """
description = "x"
max_turns = 6
tool_timeout_s = 2.5

[[mcp_servers]]
command = ["python", "server.py", "--db", "data/notes.sqlite"]
env = { NOTES_DB = "notes.sqlite" }

[[mcp_servers]]
command = ["server"]
cwd = "work"

[[mcp_servers]]
url = "http://127.0.0.1:8765/mcp"

[[tools]]
name = "convert"
function = "lib/unit_tools.py:convert"

[[tools]]
name = "dumps"
function = "json:dumps"
""",
    )
    task = load_task(path)
    here = tmp_path / "tasks"
    assert (task.max_turns, task.tool_timeout_s) == (6, 2.5)
    assert task.mcp_servers == [
        McpServerSpec(
            command=["python", "server.py", "--db", "data/notes.sqlite"], env={"NOTES_DB": "notes.sqlite"}, cwd=here
        ),
        McpServerSpec(command=["server"], cwd=here / "work"),
        McpServerSpec(url="http://127.0.0.1:8765/mcp"),
    ]
    assert [t.function for t in task.tools] == [f"{here}/lib/unit_tools.py:convert", "json:dumps"]
    assert [t.parameters for t in task.tools] == [None, None]  # from the functions, at Toolbox.open
    assert TaskSpec(description="x").max_turns == 4 and TaskSpec(description="x").tool_timeout_s == 30


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_turns = 0", r"field 'max_turns': Input should be greater than or equal to 1"),
        ("tool_timeout_s = 0", r"field 'tool_timeout_s': Input should be greater than 0"),
        (
            "[[mcp_servers]]\nenv = {}",
            r"field 'mcp_servers\[0\]': give exactly one of `command` \(a stdio server\) or `url`",
        ),
        ('[[mcp_servers]]\ncommand = ["a"]\nurl = "http://h/mcp"', r"field 'mcp_servers\[0\]': give exactly one of"),
        (
            '[[mcp_servers]]\ncommand = "python server.py"',
            r"field 'mcp_servers\[0\]\.command': Input should be a valid list",
        ),
        ("[[mcp_servers]]\ncommand = []", r"field 'mcp_servers\[0\]': `command` must name a program"),
        ('[[mcp_servers]]\nurl = "localhost:8765"', r"field 'mcp_servers\[0\]\.url': String should match pattern"),
        (
            '[[mcp_servers]]\nurl = "http://h/mcp"\nenv = { A = "1" }',
            r"`env`, `pass_env` and `cwd` apply to a stdio server",
        ),
        (
            '[[mcp_servers]]\ncommand = ["a"]\nargs = ["b"]',
            r"unknown field 'mcp_servers\[0\]\.args' \(known fields: command, url, env, pass_env, cwd\)",
        ),
        (
            '[[tools]]\nname = "t"\nfunction = "tools.py"',
            r"field 'tools\[0\]\.function': must be `file.py:name` or `module:name`",
        ),
        (
            '[[tools]]\nname = "t"\nparameters = { type = "object", properties = { a = { type = "nope" } } }',
            r"field 'tools\[0\]\.parameters': not a valid JSON schema: 'nope' is not valid",
        ),
        (
            '[[tools]]\nname = "t"\nfunctions = "a.py:f"',
            r"unknown field 'tools\[0\]\.functions' \(known fields: name, description, parameters, function\)",
        ),
    ],
)
def test_malformed_tool_fields_name_the_field(tmp_path, text, message):
    path = write(tmp_path, f'description = "x"\n{text}\n')
    with pytest.raises(AutoRLError, match=message) as error:
        load_task(path)
    assert str(error.value).startswith(f"task file {path}") and "\n" not in str(error.value)


def test_a_function_tool_without_parameters_has_no_openai_entry_of_its_own():
    with pytest.raises(ValueError, match=r"use autorl\.agents\.tools\.Toolbox\.openai_tools"):
        ToolSpec(name="t", function="json:dumps").to_openai()


def test_the_unit_conversion_example_converts():
    task = load_task(REPO / "pipelines" / "tasks" / "unit_conversion_tool.toml")
    results, toolbox = run(
        opened_calls(
            task,
            ("convert", '{"value": 13.1, "from_unit": "miles", "to_unit": "km"}'),
            ("convert", '{"value": 212, "from_unit": "degF", "to_unit": "degC"}'),
            ("convert", '{"value": 1, "from_unit": "kg", "to_unit": "parsec"}'),
        )
    )
    assert results[:2] == ["13.1 mi = 21.0824 km", "212 degF = 100 degC"]
    assert results[2].startswith("error: 'convert' raised ValueError: unknown unit 'parsec'")
    parameters = toolbox.openai_tools()[0]["function"]["parameters"]
    assert parameters["required"] == ["value", "from_unit", "to_unit"]
    assert [parameters["properties"][name]["type"] for name in parameters["required"]] == ["number", "string", "string"]


def test_a_result_is_a_str_that_says_whether_the_tool_answered(functions):
    results, _ = run(
        opened_calls(TaskSpec(description="x", tools=[tool(functions, "add")]), ("add", '{"a": 1}'), ("add", "{}"))
    )
    assert [(result.ok, result.text, type(result.text)) for result in results] == [
        (True, "3", str),
        (False, "error: invalid arguments for 'add': 'a' is a required property", str),
    ]
    assert isinstance(results[0], str) and json.dumps({"content": results[0]}) == '{"content": "3"}'
