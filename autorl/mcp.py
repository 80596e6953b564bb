"""ART's `art.mcp` path (MCP•RL: scenarios generated from an MCP server's tools). autorl has no such generator: each
name here is one clear error saying what autorl does instead."""

from .errors import refusing

MCP_RL = (
    "autorl has no MCP•RL scenario generator; `autorl run` generates a task's inputs itself (its inputs stage, "
    "from the task text) and gives the agent an MCP server's tools from the task file's [[mcp_servers]] tables "
    "(`autorl.agents.mcp`)"
)
"""What every MCP•RL name of ART's answers."""

__getattr__ = refusing(
    "autorl.mcp",
    {
        name: MCP_RL
        for name in ("generate_scenarios", "GeneratedScenario", "GeneratedScenarioCollection", "MCPResource", "MCPTool")
    },
)
