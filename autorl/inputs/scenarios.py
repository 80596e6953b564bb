"""MCP•RL scenarios as a run's inputs: for a task with `[[mcp_servers]]` and no inputs file, the inputs stage asks
its generator what ART's `generate_scenarios` asks (`autorl.mcp.generate_scenarios`: tasks the server's tools
can accomplish, each rated 1 to 5, as one JSON object through structured output), with the task's description
as the instructions, and each kept scenario becomes an input that carries its difficulty.

Each request asks for at most `SCENARIOS_PER_CALL` scenarios (a weak generator that writes 32 in one answer
runs out of tokens or context: the embedded model has 2048) and is checked as ART checks its one answer
(`autorl.mcp.generate_scenarios.parse_scenarios`): an answer cut off at the token cap, not JSON, with another
count or a difficulty outside 1-5 is unusable as a whole (logged, counted in `GenerationStats.unusable_calls`)
and the request is made again with another seed. Scenarios that are junk (`autorl.inputs.checks.junk_reason`),
shorter than `GenerationConfig.min_chars`, longer than `MAX_CHARS` or duplicates of one kept are dropped, until
N unique scenarios are kept or `calls_allowed(N)` requests were made (then InputGenerationError, one line). A
request that fails transiently is retried by `Generator.complete`, as the `openai` client retries ART's.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ruler.endpoint import registered_embedded

from ..mcp.generate_scenarios import (
    MAX_COMPLETION_TOKENS,
    parse_scenarios,
    resources_info,
    response_format,
    scenario_prompt,
    tools_info,
)
from ..mcp.types import GeneratedScenario
from ..task import TaskSpec
from .checks import junk_reason
from .dedup import DedupIndex, split_train_val
from .files import GeneratedInput, GeneratedInputs, GenerationStats
from .generation import GenerationConfig, Progress, about, call_seed, generate_system_prompt, prompt_hash
from .generator import Generator, InputGenerationError

logger = logging.getLogger(__name__)

SCENARIOS_PER_CALL = 8
"""The most scenarios one request asks for."""
TOKENS_PER_SCENARIO = 150
"""Answer tokens allowed per scenario asked for (plus `ANSWER_OVERHEAD_TOKENS`), at most ART's 8000."""
ANSWER_OVERHEAD_TOKENS = 100
MAX_CHARS = 1000
"""Longest scenario kept, in characters (ART asks for a report in each task: longer than a plain input)."""
SOURCE = "mcp_scenarios"
"""What the inputs stage's summary says its inputs are (`source`) when they are MCP•RL scenarios."""
SETTINGS = {
    "source": SOURCE,
    "per_call": SCENARIOS_PER_CALL,
    "tokens_per_scenario": TOKENS_PER_SCENARIO,
    "overhead_tokens": ANSWER_OVERHEAD_TOKENS,
    "max_chars": MAX_CHARS,
}
"""What scenario generation depends on besides the task, the generator and `GenerationConfig` (the inputs
stage's key covers it)."""


def calls_allowed(n: int) -> int:
    """Requests allowed for `n` scenarios: three per batch of `SCENARIOS_PER_CALL`, at least four."""
    return max(4, 3 * math.ceil(n / SCENARIOS_PER_CALL))


def instructions(task: TaskSpec) -> str:
    """The task as the scenarios' custom instructions: as the input requests state it (`generation.about`: the
    description, the generator instructions, examples), and that a task is the user's words."""
    return f"{about(task)}\nWrite tasks a user gives this assistant, in the user's words."


@dataclass(frozen=True)
class _Request:
    """One request: its number, how many scenarios it asks for, its seed and messages."""

    attempt: int
    size: int
    seed: int
    messages: list[dict[str, str]]


class _ScenarioWriter:
    """Makes the requests for one task's scenarios and keeps what survives the checks."""

    def __init__(self, task: TaskSpec, tools: list[Any], resources: list[Any], client: Generator, seed: int,
                 config: GenerationConfig):  # fmt: skip
        self.task, self.client, self.seed, self.config = task, client, seed, config
        self.tools, self.resources = tools_info(tools), resources_info(resources)
        self.index = DedupIndex(config.similarity_threshold)
        for example in task.seed_examples:
            self.index.block(example)
        self.kept: list[tuple[GeneratedScenario, _Request]] = []
        self.stats = GenerationStats()

    def request(self, attempt: int, size: int) -> _Request:
        prompt = scenario_prompt(self.tools, self.resources, size, instructions(self.task), report=False)
        return _Request(
            attempt, size, call_seed(self.seed, "scenarios", attempt), [{"role": "user", "content": prompt}]
        )

    def call(self, request: _Request) -> str | None:
        """The answer's text, or None when it was cut off at the token cap."""
        (answer,) = self.client.complete(
            request.messages, None, n=1, seed=request.seed, temperature=self.config.temperature,
            max_tokens=self.max_tokens(request), response_format=response_format(request.size),
        )  # fmt: skip
        return answer.text if answer.finished else None

    def max_tokens(self, request: _Request) -> int:
        """`TOKENS_PER_SCENARIO` per scenario, at most ART's cap, and within the embedded model's context."""
        wanted = min(MAX_COMPLETION_TOKENS, TOKENS_PER_SCENARIO * request.size + ANSWER_OVERHEAD_TOKENS)
        embedded = registered_embedded() if self.client.is_embedded else None
        context = embedded.context_tokens() if embedded is not None else None
        if context:  # the prompt's tokens estimated at 3 characters each, generously
            wanted = min(wanted, context - len(request.messages[0]["content"]) // 3 - 16)
        return max(wanted, 64)

    def keep(self, request: _Request, text: str | None) -> None:
        self.stats.calls += 1
        try:
            if text is None:
                raise ValueError("cut off at the token cap")
            scenarios = parse_scenarios(text, request.size)
        except (ValueError, KeyError, TypeError) as exc:
            self.stats.unusable_calls += 1
            logger.info("scenario request %d unusable: %s", request.attempt, f"{type(exc).__name__}: {exc}"[:200])
            return
        for scenario in scenarios:
            self.stats.raw += 1
            task = scenario.task.strip() if isinstance(scenario.task, str) else ""
            if not self.config.min_chars <= len(task) <= MAX_CHARS:
                self.stats.rejected += 1
            elif reason := junk_reason(task, self.task, [request.messages[0]["content"]]):
                self.stats.rejected_junk += 1
                logger.debug("scenario %r rejected: %s", task, reason)
            elif self.index.add(task):
                self.kept.append((GeneratedScenario(task, scenario.difficulty), request))
            else:
                self.stats.duplicates += 1
        self.stats.unique = len(self.kept)


def generate_scenario_inputs(
    task: TaskSpec,
    tools: list[Any],
    resources: list[Any],
    n: int | None = None,
    generator: str | Generator = "embedded",
    seed: int = 0,
    config: GenerationConfig | None = None,
    *,
    write_system_prompt: bool = False,
    progress: Progress | None = None,
) -> GeneratedInputs:
    """`n` (default `task.num_inputs`) unique MCP•RL scenarios of `task`'s `tools` and `resources` (`MCPTool`s,
    dicts or the MCP listing's objects) as inputs split into train and val, each with its difficulty (1-5);
    with `write_system_prompt`, a system prompt too (`generate_system_prompt`). Raises InputGenerationError when
    the generator fails, or `n` are not kept within `calls_allowed(n)` requests (the module docstring)."""
    config = config or GenerationConfig()
    n = task.num_inputs if n is None else n
    if not tools and not resources:
        raise InputGenerationError("MCP•RL scenarios need at least one tool or resource; the task's servers list none")
    client = generator if isinstance(generator, Generator) else Generator(generator, config.prefill)
    first = len(client.calls)
    written = generate_system_prompt(task, client, seed) if write_system_prompt else None
    writer = _ScenarioWriter(task, tools, resources, client, seed, config)
    budget = calls_allowed(n)
    with ThreadPoolExecutor(config.concurrency, thread_name_prefix="autorl-scenarios") as pool:
        while len(writer.kept) < n and writer.stats.calls < budget:
            missing, first_attempt = n - len(writer.kept), writer.stats.calls + 1
            sizes = [SCENARIOS_PER_CALL] * (missing // SCENARIOS_PER_CALL) + [missing % SCENARIOS_PER_CALL] * bool(
                missing % SCENARIOS_PER_CALL
            )
            sizes = sizes[: min(config.concurrency, budget - writer.stats.calls)]
            requests = [writer.request(first_attempt + i, size) for i, size in enumerate(sizes)]
            for request, text in zip(requests, pool.map(writer.call, requests), strict=True):
                writer.keep(request, text)
            if progress is not None:
                progress(min(n, len(writer.kept)), n)
    stats = writer.stats
    if len(writer.kept) < n:
        raise InputGenerationError(
            f"only {stats.unique} of {n} unique MCP•RL scenarios after {stats.calls} generator calls "
            f"({stats.unusable_calls} unusable answers: cut off, not JSON, another count or a difficulty outside "
            f"1-5; {stats.rejected} empty or overlong, {stats.rejected_junk} junk, {stats.duplicates} duplicates); "
            "use a stronger generator, ask for fewer inputs or give an inputs file"
        )
    kept = writer.kept[:n]
    texts = [scenario.task for scenario, _ in kept]
    rows = [
        GeneratedInput(
            input=scenario.task,
            split=split,
            difficulty=scenario.difficulty,
            generator=client.name,
            prompt_hash=prompt_hash(request.messages),
            attempt=request.attempt,
        )
        for (scenario, request), split in zip(kept, split_train_val(texts, config.val_fraction, seed), strict=True)
    ]
    return GeneratedInputs(
        system_prompt=written.text if written else None,
        system_prompt_fallback=written.fallback if written else None,
        inputs=rows,
        stats=stats,
        calls=client.calls[first:],
    )


def difficulties(rows: list[GeneratedInput]) -> dict[str, int]:
    """How many inputs have each difficulty, in order ("1": 3, "2": 5, ...), those without one left out."""
    counts = Counter(str(row.difficulty) for row in rows if row.difficulty is not None)
    return dict(sorted(counts.items()))
