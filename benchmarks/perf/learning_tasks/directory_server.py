"""The `lookup_extension` tool of `directory.toml` as a stdio MCP server, for `directory_mcp.toml`: the same
function, description and argument as the `[[tools]]` function, reached over MCP, so that the two tasks differ
in how the tool reaches the agent and in one more thing: the MCP SDK's schema allows arguments beyond `name`,
which the server ignores, where the function tool refuses a call that passes any (its schema has
`additionalProperties: false`).

    python directory_server.py   # MCP over stdin/stdout (how autorl starts it, in this directory)
"""

from __future__ import annotations

from typing import Annotated

from directory import lookup_extension as lookup  # this file's directory is the server's working directory
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

app = MCPServer("directory")


@app.tool(description=lookup.__doc__.split("\n\n")[0])
def lookup_extension(name: Annotated[str, Field(description="The employee's full name, e.g. 'Jane Doe'.")]) -> str:
    try:
        return lookup(name)
    except ValueError as exc:  # an MCP error result, which the agent sees as "error: ..."
        raise ToolError(str(exc)) from exc


if __name__ == "__main__":
    app.run()
