"""ART's `art.mcp` (MCP•RL): scenarios for an agent, each a task with a difficulty from 1 to 5, written by any
OpenAI-compatible generator from an MCP server's tools and resources (`generate_scenarios`), the types it uses
(`MCPTool`, `MCPResource`, `GeneratedScenario`, `GeneratedScenarioCollection`) and ART's finishing tool
(`complete_task_tool`). `autorl run` asks the same question for a task with `[[mcp_servers]]` and no inputs
file (`autorl.inputs.scenarios`)."""

from .default_tools import complete_task_tool
from .generate_scenarios import generate_scenarios
from .types import GeneratedScenario, GeneratedScenarioCollection, MCPResource, MCPTool

__all__ = [
    "GeneratedScenario",
    "GeneratedScenarioCollection",
    "MCPResource",
    "MCPTool",
    "complete_task_tool",
    "generate_scenarios",
]
