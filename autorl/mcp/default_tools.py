"""ART's `art.mcp.default_tools`: `complete_task_tool`, the tool an MCP•RL agent calls to say it is done (its
`summary` argument: what it accomplished), offered beside the server's own tools."""

from .types import MCPTool

complete_task_tool = MCPTool(
    name="complete_task",
    description="Complete a task",
    parameters={
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "Summary of accomplishments"}},
        "required": ["summary"],
    },
)
"""The finishing tool, as ART defines it."""
