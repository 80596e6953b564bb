"""Generate the policy's system prompt and N train/validation inputs from a task.

The generator is a model spec (`ruler.endpoint`, the same forms as a judge model): `"embedded"` (the
embedded model on autorl's local vLLM server), any LiteLLM model string (`"openai/gpt-4.1-mini"`), or
`name@http://host:port/v1` for model `name` on any OpenAI-compatible server.

Each input is one sampled answer to a short plain-text request: the task, the generator instructions and
any seed examples, then "Write a message that a user sends to this assistant." Where the server continues
a prefilled answer (vLLM does: the embedded generator and `name@URL` endpoints, `GenerationConfig.prefill`),
the answer starts as `The user writes: "` and stops at the closing quote, which holds even a 135M model to
one message and nothing else; one request returns `samples_per_call` answers, sampled at temperature 1.
This replaced a JSON batch of five inputs per call (DSPy's JSON adapter with a schema bounding every
string), which the embedded model answered with echoes of its own instructions and, on CPU, at a few
tokens a second (benchmarks/perf/perf_structured_output.py, perf_generator.py; docs/inputs.md).

Answers that are empty, cut off (no closing quote, or the token cap), placeholder-like junk (template
echoes, single identifiers, copies of the instructions: `autorl.inputs.checks.junk_reason`) or exact or
near-duplicates (`autorl.inputs.dedup`) are dropped, until N unique inputs exist or `max_calls` requests
were made (then InputGenerationError). The N inputs are split into train and validation by a seeded hash
(`autorl.inputs.dedup.split_train_val`). A system prompt that fails
`autorl.inputs.checks.system_prompt_problem` in every try is replaced by the task description
(`WrittenSystemPrompt.fallback` says why). Every request is recorded (`ruler.calls.CallRecord`: seconds,
tokens, how it ended) in `GeneratedInputs.calls` and `WrittenSystemPrompt.calls`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from ruler.calls import CallRecord

from ..errors import AutoRLError
from ..task import TaskSpec
from .checks import SYSTEM_PROMPT_CHARS, junk_reason, system_prompt_problem
from .dedup import DEFAULT_VAL_FRACTION, NEAR_DUPLICATE_THRESHOLD, DedupIndex, split_train_val
from .files import Difficulty, GeneratedInput, GeneratedInputs, GenerationStats
from .generator import Answer, Generator, InputGenerationError

SYSTEM_PROMPT_TRIES = 3
"""Requests (with different seeds) for a system prompt that passes the checks, before falling back."""
MIN_YIELD_PER_CALL = 0.25
"""The fewest new unique inputs a request is expected to bring when planning a round of requests."""
INPUT_PREFILL = 'The user writes: "'
"""How an input's answer starts where the server continues a prefilled answer; it ends at the closing quote."""
PROMPT_PREFILL = "You are"
"""How a system prompt's answer starts where the server continues a prefilled answer (and the prompt with it)."""
DIFFICULTIES: dict[Difficulty, str] = {"easy": "", "medium": " that needs some care", "hard": " that is unusual"}
"""What each difficulty adds to the request ("Write a message ... that is unusual"). A 135M generator writes
its best inputs when asked plainly (docs/inputs.md), so only every third request asks for more."""


logger = logging.getLogger(__name__)


class GenerationConfig(BaseModel):
    """How inputs are generated, filtered and split (CLI flags override these)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    samples_per_call: int = Field(4, ge=1, le=16)
    """Answers one request asks for (the `n` of a chat completion), each a candidate input; a server that
    returns fewer (a provider without `n`) is used as it is."""
    max_calls: int | None = Field(None, ge=1)
    """Cap on requests for the inputs; None allows max(16, ceil(4 x N / samples_per_call)): four candidates per
    input wanted (the embedded model kept about one in two on the tasks measured)."""
    concurrency: int = Field(4, ge=1)
    """Requests in flight at once."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature of the generator: high, for varied inputs (duplicates are dropped anyway)."""
    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling of the generator."""
    max_tokens: int = Field(160, ge=16)
    """Token cap of one answer; an answer cut by it counts as cut off and is dropped."""
    prefill: bool | None = None
    """Start each answer with a prefix the server continues (`INPUT_PREFILL`, vLLM's `continue_final_message`),
    so the answer is the input alone. None: on for the embedded generator and `name@URL` endpoints (vLLM
    servers), off for LiteLLM providers (which reject it); their answer is taken whole, quotes stripped."""
    min_chars: int = Field(8, ge=1)
    """Shortest input kept, in characters."""
    max_chars: int = Field(400, ge=16)
    """Longest input kept, in characters; a longer one is dropped as rambling."""
    similarity_threshold: float = Field(NEAR_DUPLICATE_THRESHOLD, gt=0, le=1)
    """Character-trigram Jaccard similarity at or above which two inputs are duplicates."""
    val_fraction: float = Field(DEFAULT_VAL_FRACTION, ge=0, lt=1)
    """Share of the inputs held out for validation."""

    def calls_allowed(self, n: int) -> int:
        return self.max_calls or max(16, math.ceil(4 * n / self.samples_per_call))


def call_seed(seed: int, purpose: str, attempt: int) -> int:
    """The seed of request number `attempt` made for `purpose` in a generation seeded with `seed`."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{purpose}:{attempt}".encode()).digest()[:4], "big") >> 1


def prompt_hash(messages: list[dict[str, str]]) -> str:
    """SHA-256 prefix of the messages a request sends (an input's `prompt_hash`)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def about(task: TaskSpec) -> str:
    """The task as the generator's requests state it: the description, the generator instructions, examples."""
    text = f"An AI assistant has this job: {task.description.rstrip('.')}."
    if task.generator_instructions:
        text += f"\n{task.generator_instructions}"
    if task.seed_examples:
        text += "\nMessages users sent it before:" + "".join(f'\n- "{example}"' for example in task.seed_examples)
    return text


def input_request(task: TaskSpec, difficulty: Difficulty = "easy") -> str:
    """The text of a request for one input of `task` (what the generator is asked; inputs that copy it are junk)."""
    return f"{about(task)}\nWrite a message{DIFFICULTIES[difficulty]} that a user sends to this assistant."


@dataclass
class WrittenSystemPrompt:
    """What `generate_system_prompt` returns."""

    text: str
    """The system prompt to use: the generated one, or the task description when `fallback` is set."""
    fallback: str | None
    """Why the last generated prompt failed the checks (`autorl.inputs.checks.system_prompt_problem`) and the
    task description is used instead; None when a generated prompt passed."""
    calls: list[CallRecord] = field(default_factory=list)
    """The generator requests made for it (none for a task's own system prompt)."""


def generate_system_prompt(task: TaskSpec, generator: str | Generator, seed: int = 0) -> WrittenSystemPrompt:
    """A system prompt for the policy, written by the generator from the task description (the task's own
    `system_prompt`, as written and without a request, when it has one).

    Up to SYSTEM_PROMPT_TRIES requests; the first prompt that passes the checks is used. When none passes,
    the task description is the system prompt (logged as a warning, and `fallback` names the reason).
    """
    if task.system_prompt is not None:
        return WrittenSystemPrompt(task.system_prompt, None)
    client = generator if isinstance(generator, Generator) else Generator(generator)
    first = len(client.calls)
    request = [
        {
            "role": "user",
            "content": f"Write the instructions for an AI assistant whose job is: {task.description.rstrip('.')}. "
            'Speak to the assistant as "you"; say what it must do and what its answer must look like. '
            "Write only the instructions.",
        }
    ]
    lead = PROMPT_PREFILL if client.prefill else ""
    problem = "no answer"
    for attempt in range(1, SYSTEM_PROMPT_TRIES + 1):
        seed_ = call_seed(seed, "system_prompt", attempt)
        (answer,) = client.complete(
            request, PROMPT_PREFILL, n=1, seed=seed_, temperature=0.7, max_tokens=SYSTEM_PROMPT_CHARS[1] // 3
        )
        prompt = (lead + answer.text).strip() if answer.finished else ""
        problem = system_prompt_problem(prompt, task) if prompt else "cut off at the token cap"
        if problem is None:
            return WrittenSystemPrompt(prompt, None, client.calls[first:])
        logger.info("generated system prompt %d rejected: %s", attempt, problem)
    logger.warning("the generated system prompt is unusable (%s); using the task description instead", problem)
    return WrittenSystemPrompt(task.description, problem, client.calls[first:])


class _Request(BaseModel):
    """One planned request for candidate inputs."""

    attempt: int
    difficulty: Difficulty
    seed: int
    messages: list[dict[str, str]]

    @property
    def prompt_hash(self) -> str:
        """SHA-256 prefix of the messages this request sends."""
        return prompt_hash(self.messages)


class _InputWriter:
    """Makes the requests for one task's inputs and keeps what survives the quality controls."""

    def __init__(self, task: TaskSpec, client: Generator, seed: int, config: GenerationConfig):
        self.task, self.client, self.seed, self.config = task, client, seed, config
        self.index = DedupIndex(config.similarity_threshold)
        for example in task.seed_examples:
            self.index.block(example)
        self.sources: list[_Request] = []
        """The request each kept input came from, parallel to `index.kept`."""
        self.stats = GenerationStats()

    def request(self, attempt: int) -> _Request:
        """Request number `attempt`: every third asks for a harder input."""
        difficulty: Difficulty = list(DIFFICULTIES)[(attempt - 1) % 3]
        messages = [{"role": "user", "content": input_request(self.task, difficulty)}]
        return _Request(
            attempt=attempt, difficulty=difficulty, seed=call_seed(self.seed, "inputs", attempt), messages=messages
        )

    def call(self, request: _Request) -> list[Answer]:
        c = self.config
        return self.client.complete(
            request.messages,
            INPUT_PREFILL,
            n=c.samples_per_call,
            seed=request.seed,
            temperature=c.temperature,
            top_p=c.top_p,
            max_tokens=c.max_tokens,
            **({"stop": ['"']} if self.client.prefill else {}),
        )

    def text_of(self, answer: Answer) -> str | None:
        """The input an answer holds, or None when it was cut off."""
        if not answer.finished:
            return None
        text = answer.text.strip()
        if not self.client.prefill:  # the whole answer, without the quotes it may come in
            text = text.strip().strip('"').strip()
        return text

    def keep(self, request: _Request, answers: list[Answer]) -> None:
        self.stats.calls += 1
        if not answers:
            self.stats.unusable_calls += 1
            return
        for answer in answers:
            self.stats.raw += 1
            text = self.text_of(answer)
            if text is None or not self.config.min_chars <= len(text) <= self.config.max_chars:
                self.stats.rejected += 1
            elif reason := junk_reason(text, self.task, [request.messages[0]["content"]]):
                self.stats.rejected_junk += 1
                logger.debug("input %r rejected: %s", text, reason)
            elif self.index.add(text):
                self.sources.append(request)
            else:
                self.stats.duplicates += 1
        self.stats.unique = len(self.index)


Progress = Callable[[int, int], None]
"""Told (inputs kept, inputs wanted) after each round of requests."""


def generate_inputs(
    task: TaskSpec,
    n: int | None = None,
    generator: str | Generator = "embedded",
    seed: int = 0,
    config: GenerationConfig | None = None,
    *,
    write_system_prompt: bool = True,
    progress: Progress | None = None,
) -> GeneratedInputs:
    """A system prompt and `n` (default `task.num_inputs`) unique inputs split into train and val.

    write_system_prompt: False skips the system prompt (the pipeline makes it in a stage of its own).
    progress: called with (kept, wanted) after each round of requests (the CLI shows a bar with it).

    Deterministic for a given generator, seed and config when the generator honours `seed` (vLLM does).
    Raises InputGenerationError if the generator fails, or if `n` unique inputs are not reached within
    `config.calls_allowed(n)` requests.
    """
    config = config or GenerationConfig()
    n = task.num_inputs if n is None else n
    if n <= 0:
        raise AutoRLError(f"the number of inputs must be at least 1, got {n}")
    client = generator if isinstance(generator, Generator) else Generator(generator, config.prefill)
    first = len(client.calls)
    written = generate_system_prompt(task, client, seed) if write_system_prompt else None
    writer = _InputWriter(task, client, seed, config)
    _fill(writer, n, config, progress)
    stats = writer.stats
    if len(writer.index) < n:
        raise InputGenerationError(
            f"only {stats.unique} of {n} unique inputs after {stats.calls} generator calls ({stats.unusable_calls} "
            f"empty replies, {stats.rejected} empty, cut-off or overlong inputs, {stats.rejected_junk} junk inputs, "
            f"{stats.duplicates} duplicates); use a stronger generator, ask for fewer inputs or allow more calls"
        )
    texts = writer.index.kept[:n]
    model_name = client.name
    rows = [
        GeneratedInput(
            input=text,
            split=split,
            difficulty=request.difficulty,
            generator=model_name,
            prompt_hash=request.prompt_hash,
            attempt=request.attempt,
        )
        for text, split, request in zip(
            texts, split_train_val(texts, config.val_fraction, seed), writer.sources, strict=False
        )
    ]
    return GeneratedInputs(
        system_prompt=written.text if written else None,
        system_prompt_fallback=written.fallback if written else None,
        inputs=rows,
        stats=stats,
        calls=client.calls[first:],
    )


def _fill(writer: _InputWriter, n: int, config: GenerationConfig, progress: Progress | None) -> None:
    """Rounds of requests until `n` inputs are kept or the budget is spent; each round asks for the inputs still
    missing at the yield seen so far (a weak generator's answers are mostly junk and duplicates: asking for
    them in one round beats one slow round after another), and keeps answers in request order, so the
    result is deterministic."""
    budget = config.calls_allowed(n)
    with ThreadPoolExecutor(config.concurrency, thread_name_prefix="autorl-generator") as pool:
        _rounds(writer, n, config, progress, budget, pool)


def _rounds(
    writer: _InputWriter, n: int, config: GenerationConfig, progress: Progress | None, budget: int, pool: Executor
) -> None:
    while len(writer.index) < n and writer.stats.calls < budget:
        per_call = writer.stats.unique_per_call if writer.stats.calls else config.samples_per_call
        wanted = math.ceil((n - len(writer.index)) / max(per_call, MIN_YIELD_PER_CALL))
        first = writer.stats.calls + 1
        attempts = range(first, first + min(config.concurrency, wanted, budget - writer.stats.calls))
        requests = [writer.request(attempt) for attempt in attempts]
        for request, answers in zip(requests, pool.map(writer.call, requests), strict=True):
            writer.keep(request, answers)
        if progress is not None:
            progress(min(n, len(writer.index)), n)
