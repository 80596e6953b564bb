"""The learning benchmark's MCP•RL task (benchmarks/perf/learning_tasks/offices_mcp.toml): two tools of a real stdio
MCP server a question needs in sequence (the id `find_employee` gives is the argument of `get_office`), and its
judge, which credits each step of that chain and the office only the second call gives."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from autorl.agents.tools import Toolbox
from autorl.task import load_task
from benchmarks.perf.learning_tasks.judges import offices_mcp
from benchmarks.perf.learning_tasks.offices import EMPLOYEES, employee_id, office

TASK = Path(__file__).resolve().parents[2] / "benchmarks" / "perf" / "learning_tasks" / "offices_mcp.toml"


def call(number: int, name: str, arguments: dict, result: str) -> list[dict]:
    tool_call = {"id": f"c{number}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": f"c{number}", "content": result},
    ]


def test_the_office_is_reached_only_through_both_tools_of_the_server_and_the_judge_credits_each_step():
    async def chain() -> tuple[str, str, str, list[str]]:
        async with await Toolbox.open(load_task(TASK)) as toolbox:
            found = await toolbox.call("find_employee", {"name": "kira  novak"})
            sits = await toolbox.call("get_office", {"employee_id": found.split()[-1]})
            wrong = await toolbox.call("get_office", {"employee_id": "Kira Novak"})
            return found, sits, wrong, list(toolbox.tools)

    found, sits, wrong, tools = asyncio.run(chain())
    assert tools == ["find_employee", "get_office"]
    assert found == f"Kira Novak: employee id {employee_id('Kira Novak')}"
    assert sits.endswith(f"office {office('Kira Novak')}") and wrong.startswith("error:")
    asked = [{"role": "user", "content": "Which office is Kira Novak in?"}]
    first = call(1, "find_employee", {"name": "Kira Novak"}, found)
    second = call(2, "get_office", {"employee_id": employee_id("Kira Novak")}, sits)
    answer = {"role": "assistant", "content": f"Kira Novak sits in {office('Kira Novak')}."}
    assert offices_mcp([*asked, *first, *second, answer]) == 1.0
    assert offices_mcp([*asked, *first, *second, {"role": "assistant", "content": "Somewhere."}]) == 0.5
    assert offices_mcp([*asked, *first, {"role": "assistant", "content": "I don't know."}]) == 0.3
    assert offices_mcp([*asked, *call(1, "get_office", {"employee_id": "x"}, wrong), answer]) == 1.0  # a right reply
    assert offices_mcp([*asked, {"role": "assistant", "content": "A1-100"}]) == 0.0
    assert len({office(name) for name in EMPLOYEES}) >= 18  # nearly one office each: a guess rarely scores
