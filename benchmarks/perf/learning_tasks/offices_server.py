"""The tools of `offices.py` as a stdio MCP server, for `offices_mcp.toml`: `find_employee` (a name to an employee
id) and `get_office` (that id to an office), which a question needs in sequence, and one resource, the staff
list, which shows a scenario generator whom it may ask about (MCP•RL: `autorl.mcp.generate_scenarios`).

    python offices_server.py   # MCP over stdin/stdout (how autorl starts it, in this directory)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import offices  # this file's directory is the server's working directory
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

app = MCPServer("offices")


def _first_line(function: Callable[..., str]) -> str:
    return (function.__doc__ or "").split("\n\n")[0]


@app.tool(description=_first_line(offices.find_employee))
def find_employee(name: Annotated[str, Field(description="The employee's full name, e.g. 'Jane Doe'.")]) -> str:
    try:
        return offices.find_employee(name)
    except ValueError as exc:  # an MCP error result, which the agent sees as "error: ..."
        raise ToolError(str(exc)) from exc


@app.tool(description=_first_line(offices.get_office))
def get_office(employee_id: Annotated[str, Field(description="The employee id find_employee gave.")]) -> str:
    try:
        return offices.get_office(employee_id)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc


@app.resource("staff://names", name="staff", description="The full names of everyone in the company, one a line.")
def staff() -> str:
    return "\n".join(offices.EMPLOYEES)


if __name__ == "__main__":
    app.run()
