"""ART's `art.mcp.generate_scenarios`: tasks for an agent, each with a difficulty from 1 to 5, written by a generator
model from an MCP server's tools and resources.

One chat request to any OpenAI-compatible endpoint (`generator_base_url`, OpenRouter by default, as in ART),
asking for a JSON object `{"scenarios": [{"task", "difficulty"}, ...]}` of exactly `num_scenarios` items through
structured output (`response_format` json_schema, which vLLM and OpenAI enforce). The answer is checked as ART
checks it, each failure a ValueError: no content, not JSON (`json.JSONDecodeError`), another count of scenarios,
a difficulty that is not an integer from 1 to 5 (a scenario without `task` or `difficulty` is a KeyError). A
request that fails transiently (a refused connection, a timeout, a 429 or 5xx) is retried by the `openai`
client, twice, as ART's is; an answer that fails the checks is not: call again (`autorl run` does, with a
different seed: `autorl.inputs.scenarios`).

The pieces are public for `autorl run`'s inputs stage, which asks the same question of its own generator
(`autorl.inputs.scenarios`): `tools_info` / `resources_info` (what the generator is shown), `scenario_prompt`,
`response_format` and `parse_scenarios`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from .types import GeneratedScenarioCollection, MCPResource, MCPTool, scenario_list

logger = logging.getLogger(__name__)

MAX_COMPLETION_TOKENS = 8000
"""Token cap of the generator's answer, ART's (`max_completion_tokens`)."""
API_KEY_ENV = "OPENROUTER_API_KEY"
"""Where the generator's key is read when none is given, as in ART."""


def tools_info(tools: list[MCPTool] | list[dict[str, Any]] | list[Any]) -> list[dict[str, Any]]:
    """Each tool as `{"name", "description", "parameters"}`: an `MCPTool`, a dict, or an object with those
    attributes (an `mcp.types.Tool`'s `inputSchema` is its `parameters`)."""
    out = []
    for tool in tools:
        if isinstance(tool, MCPTool):
            out.append(tool.to_dict())
        elif isinstance(tool, dict):
            out.append(MCPTool.from_dict(tool).to_dict())
        else:
            fields = ("name", "description", "parameters", "inputSchema", "input_schema")
            out.append(MCPTool.from_dict({key: getattr(tool, key, None) for key in fields}).to_dict())
    return out


def resources_info(resources: list[MCPResource] | list[dict[str, Any]] | list[Any] | None) -> list[dict[str, Any]]:
    """Each resource as `{"uri", "name", "description"[, "mimeType"]}`: an `MCPResource`, a dict (as given, as in
    ART), or an object with those attributes (an `mcp.types.Resource`)."""
    out = []
    for resource in resources or []:
        if isinstance(resource, MCPResource):
            out.append(resource.to_dict())
        elif isinstance(resource, dict):
            out.append(resource)
        else:
            fields = ("uri", "name", "description", "mimeType", "mime_type")
            out.append(MCPResource.from_dict({key: getattr(resource, key, None) for key in fields}).to_dict())
    return out


def scenario_prompt(
    tools: list[dict[str, Any]],
    resources: list[dict[str, Any]],
    num_scenarios: int,
    custom_instructions: str | None = None,
    *,
    report: bool = True,
) -> str:
    """What the generator is asked: `num_scenarios` varied, realistic tasks the tools (as `tools_info` gives them)
    can accomplish, each rated 1-5, as one JSON object. `report`: every task also asks for a summary and an
    analysis of the work (ART's requirement; `autorl run` leaves it to the task's description)."""
    listed = json.dumps(resources, indent=2) if resources else "No resources available"
    rules = [
        "Each scenario is a task that can be accomplished with the available tools.",
        "Vary the complexity: some need one or two tool calls, others several calls in sequence.",
        "Cover different uses and combinations of the tools, but never name the tools a task should use.",
        "Make each scenario realistic: something a real user would want done.",
        "Rate each scenario's difficulty from 1 (easy: one tool call) to 5 (hard: a complex analysis in many steps).",
    ]
    if report:
        rules.append(
            "Every task asks for a summary of the work done and a thorough analysis and report of the results."
        )
    numbered = "\n".join(f"{number}. {rule}" for number, rule in enumerate(rules, 1))
    prompt = (
        "You write realistic scenarios for testing AI agents that use the tools of an MCP (Model Context "
        f"Protocol) server.\n\nWrite {num_scenarios} diverse scenarios a user might want accomplished with the "
        f"tools and resources below.\n\nAVAILABLE TOOLS:\n{json.dumps(tools, indent=2)}\n\nAVAILABLE RESOURCES:\n"
        f'{listed}\n\nRequirements:\n{numbered}\n\nAnswer with a JSON object whose "scenarios" array holds exactly '
        f'{num_scenarios} objects, each with "task" (a string: the scenario) and "difficulty" (an integer from 1 to 5).'
    )
    if custom_instructions:
        prompt += f"\n\nFollow these instructions closely when writing the scenarios:\n\n{custom_instructions}"
    return prompt


def response_format(num_scenarios: int) -> dict[str, Any]:
    """The `response_format` of the request: a JSON schema of exactly `num_scenarios` scenarios."""
    scenario = {
        "type": "object",
        "properties": {"task": {"type": "string"}, "difficulty": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["task", "difficulty"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {
            "scenarios": {"type": "array", "items": scenario, "minItems": num_scenarios, "maxItems": num_scenarios}
        },
        "required": ["scenarios"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "scenario_list", "schema": schema}}


def parse_scenarios(content: str | None, num_scenarios: int) -> GeneratedScenarioCollection:
    """The generator's answer as scenarios, checked as ART checks it: ValueError for no content, JSON that does
    not parse (`json.JSONDecodeError`) or another count than `num_scenarios`; a scenario's own ValueError or
    KeyError (`GeneratedScenario`) for a bad difficulty or a missing field."""
    if content is None:
        raise ValueError("Model response content is None")
    scenarios = scenario_list(json.loads(content))
    if not isinstance(scenarios, list) or len(scenarios) != num_scenarios:
        got = len(scenarios) if isinstance(scenarios, list) else type(scenarios).__name__
        raise ValueError(f"Expected {num_scenarios} scenarios, got {got}")
    return GeneratedScenarioCollection.from_dicts(scenarios)


async def generate_scenarios(
    tools: list[MCPTool] | list[dict[str, Any]],
    resources: list[MCPResource] | list[dict[str, Any]] | None = None,
    num_scenarios: int = 24,
    show_preview: bool = True,
    custom_instructions: str | None = None,
    generator_model: str = "openai/gpt-4.1-mini",
    generator_api_key: str | None = None,
    generator_base_url: str = "https://openrouter.ai/api/v1",
    max_completion_tokens: int = MAX_COMPLETION_TOKENS,
) -> GeneratedScenarioCollection:
    """`num_scenarios` scenarios for an agent with `tools` (and `resources`), written by `generator_model` on the
    OpenAI-compatible endpoint `generator_base_url` (the module docstring says what is checked and retried).

    generator_api_key: None reads `OPENROUTER_API_KEY` (a ValueError when it is unset, as in ART); a local server
    that wants none takes any string. show_preview: print the difficulty distribution and the first five.
    max_completion_tokens: ART's 8000 by default (autorl's addition: a server with a short context, such as the
    embedded model's 2048 tokens, needs less). Raises ValueError when there are neither tools nor resources.
    """
    import openai  # the client: imported on use, as `autorl.mcp` is imported with `autorl`'s names

    started = time.perf_counter()
    if generator_api_key is None:
        generator_api_key = os.getenv(API_KEY_ENV)
        if not generator_api_key:
            raise ValueError(f"generator_api_key is required or {API_KEY_ENV} env var must be set")
    if not tools and not resources:
        raise ValueError("At least one tool or resource must be provided")
    shown_tools, shown_resources = tools_info(tools), resources_info(resources)
    logger.info("generating %d scenarios with %s from %d tool(s) and %d resource(s)", num_scenarios,
                generator_model, len(shown_tools), len(shown_resources))  # fmt: skip
    client = openai.AsyncOpenAI(api_key=generator_api_key, base_url=generator_base_url)
    try:
        response = await client.chat.completions.create(
            model=generator_model,
            messages=[
                {
                    "role": "user",
                    "content": scenario_prompt(shown_tools, shown_resources, num_scenarios, custom_instructions),
                }
            ],
            max_completion_tokens=max_completion_tokens,
            response_format=response_format(num_scenarios),  # type: ignore[arg-type]
        )
    finally:
        await client.close()
    collection = parse_scenarios(response.choices[0].message.content, num_scenarios)
    if show_preview:
        collection.print_difficulty_distribution()
        collection.preview(n=min(5, num_scenarios))
    logger.info("generated %d scenarios in %.2f s", len(collection), time.perf_counter() - started)
    return collection
