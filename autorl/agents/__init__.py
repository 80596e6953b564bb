"""Agents that answer inputs: the agent loop every rollout runs (rollout.py), the tools it calls (tools.py,
their schemas from Python signatures in tool_schema.py), MCP servers (mcp.py), LangGraph agents (langgraph.py)."""
