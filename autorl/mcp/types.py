"""ART's `art.mcp.types`: an MCP server's tools and resources as the scenario generator is shown them (`MCPTool`,
`MCPResource`), and what it writes (`GeneratedScenario`: a task and its difficulty, 1 to 5;
`GeneratedScenarioCollection`: many, with ART's helpers to shuffle, split, filter and preview them)."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MIN_DIFFICULTY, MAX_DIFFICULTY = 1, 5
"""A scenario's difficulty: 1 (easy, one tool call) to 5 (hard, a complex analysis in many steps)."""


@dataclass
class MCPTool:
    """One tool of an MCP server: its name, description and JSON schema of its arguments (`parameters`)."""

    name: str
    description: str
    parameters: dict[str, Any]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MCPTool:
        """From `{"name", "description", "parameters"}` (an MCP listing's `inputSchema` is taken for `parameters`
        where there is none); a missing field is empty."""
        parameters = data.get("parameters") or data.get("inputSchema") or data.get("input_schema") or {}
        return cls(name=data.get("name", ""), description=data.get("description") or "", parameters=parameters)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def to_tool_schema(self) -> dict[str, Any]:
        """The tool as an entry of the OpenAI `tools` request parameter."""
        return {"type": "function", "function": self.to_dict()}


@dataclass
class MCPResource:
    """One resource of an MCP server: its URI, name, description and MIME type."""

    uri: str
    name: str
    description: str
    mime_type: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MCPResource:
        """From `{"uri", "name", "description", "mimeType"}` (`mime_type` also read); a missing field is empty."""
        return cls(
            uri=str(data.get("uri", "")),
            name=data.get("name", ""),
            description=data.get("description") or "",
            mime_type=data.get("mimeType") or data.get("mime_type"),
        )

    def to_dict(self) -> dict[str, Any]:
        """As MCP spells it: `mimeType`, left out when unknown."""
        out = {"uri": self.uri, "name": self.name, "description": self.description}
        return out | ({"mimeType": self.mime_type} if self.mime_type else {})


@dataclass
class GeneratedScenario:
    """One task a user might give an agent that has the server's tools, with its difficulty (an int, 1 to 5;
    anything else is a ValueError, as in ART)."""

    task: str
    difficulty: int

    def __post_init__(self) -> None:
        if not isinstance(self.difficulty, int) or not MIN_DIFFICULTY <= self.difficulty <= MAX_DIFFICULTY:
            raise ValueError("Difficulty must be an integer between 1 and 5")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GeneratedScenario:
        """From `{"task", "difficulty"}`: a KeyError when one is missing, as in ART."""
        return cls(task=data["task"], difficulty=data["difficulty"])

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "difficulty": self.difficulty}

    def preview(self, max_length: int = 120) -> str:
        """The task, cut to `max_length` characters with an ellipsis."""
        return self.task if len(self.task) <= max_length else self.task[:max_length].strip() + "…"


class GeneratedScenarioCollection:
    """Scenarios, in order, with ART's helpers: JSON in and out, shuffle, split, filter by difficulty, the
    difficulty distribution, a preview."""

    def __init__(self, scenarios: list[GeneratedScenario]):
        self.scenarios = scenarios

    @classmethod
    def from_dicts(cls, data: list[dict[str, Any]]) -> GeneratedScenarioCollection:
        return cls([GeneratedScenario.from_dict(item) for item in data])

    @classmethod
    def from_json(cls, json_str: str) -> GeneratedScenarioCollection:
        """From `{"scenarios": [...]}`, a bare list, or an object whose first value is the list."""
        return cls.from_dicts(scenario_list(json.loads(json_str)))

    def to_dicts(self) -> list[dict[str, Any]]:
        return [scenario.to_dict() for scenario in self.scenarios]

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps({"scenarios": self.to_dicts()}, indent=indent)

    def __len__(self) -> int:
        return len(self.scenarios)

    def __iter__(self) -> Iterator[GeneratedScenario]:
        return iter(self.scenarios)

    def __getitem__(self, index: int) -> GeneratedScenario:
        return self.scenarios[index]

    def shuffle(self) -> GeneratedScenarioCollection:
        """A new collection in random order (`random`'s global generator, as ART)."""
        shuffled = self.scenarios.copy()
        random.shuffle(shuffled)
        return GeneratedScenarioCollection(shuffled)

    def split(self, train_size: int) -> tuple[GeneratedScenarioCollection, GeneratedScenarioCollection]:
        """The first `train_size` scenarios and the rest; a ValueError when there are fewer."""
        if train_size > len(self.scenarios):
            raise ValueError(f"train_size ({train_size}) cannot be larger than total scenarios ({len(self.scenarios)})")
        return (
            GeneratedScenarioCollection(self.scenarios[:train_size]),
            GeneratedScenarioCollection(self.scenarios[train_size:]),
        )

    def filter_by_difficulty(
        self, min_difficulty: int = MIN_DIFFICULTY, max_difficulty: int = MAX_DIFFICULTY
    ) -> GeneratedScenarioCollection:
        return GeneratedScenarioCollection(
            [s for s in self.scenarios if min_difficulty <= s.difficulty <= max_difficulty]
        )

    def get_difficulty_distribution(self) -> Counter:
        """Scenarios per difficulty."""
        return Counter(scenario.difficulty for scenario in self.scenarios)

    def preview(self, n: int = 5, max_task_length: int = 120) -> None:
        """Print the first `n` scenarios, each with its difficulty."""
        for number, scenario in enumerate(self.scenarios[:n], 1):
            print(f"   {number}. {scenario.preview(max_task_length)}  (difficulty {scenario.difficulty}/5)")

    def print_difficulty_distribution(self) -> None:
        """Print how many scenarios each difficulty has, with a bar."""
        counts = self.get_difficulty_distribution()
        print("Difficulty distribution:")
        for difficulty in range(MIN_DIFFICULTY, MAX_DIFFICULTY + 1):
            count = counts.get(difficulty, 0)
            print(f"   {difficulty}/5: {count:3d}  {'█' * min(count, 30)}")

    def get_summary(self) -> dict[str, Any]:
        """The count, the difficulty distribution, the mean difficulty and the mean task length (0 when empty)."""
        total = len(self.scenarios)
        return {
            "total_scenarios": total,
            "difficulty_distribution": dict(self.get_difficulty_distribution()),
            "avg_difficulty": sum(s.difficulty for s in self.scenarios) / total if total else 0,
            "avg_task_length": sum(len(s.task) for s in self.scenarios) / total if total else 0,
        }


def scenario_list(data: Any) -> list[dict[str, Any]]:
    """The scenarios of a parsed answer, read as ART reads them: its `scenarios`, else the answer itself when
    it is a list, else the first value of the object."""
    if isinstance(data, dict) and "scenarios" in data:
        return data["scenarios"]
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and data:
        return next(iter(data.values()))
    raise ValueError("the answer holds no scenarios")
