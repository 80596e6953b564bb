"""Generate the policy's system prompt and N train/validation inputs from a task, with DSPy.

Two typed DSPy signatures, `WriteSystemPrompt` and `WriteInputs`, run through `dspy.JSONAdapter`
on a `dspy.LM` that points at the generator, a model spec (`ruler.endpoint`, the same forms as a judge
model): `"embedded"` (the local vLLM server on the embedded model), any LiteLLM model string
(`"openai/gpt-4.1-mini"`), or `name@http://host:port/v1` for model `name` on any OpenAI-compatible
server. Every call sends a `response_format` JSON schema that bounds each string's
length and the list's size, so a server with guided decoding (vLLM) can only produce JSON that
parses, even from a 135M model.

Inputs are asked for in batches of `batch_size`; each call varies the requested difficulty and
length and lists a few inputs already kept, which it must not repeat. Replies that do not parse,
inputs that are empty or hit the length cap (cut off), placeholder-like junk (template echoes, single
identifiers, copies of the instructions: `autorl.inputs.checks.junk_reason`) and exact or
near-duplicates (`autorl.inputs.dedup`) are dropped, until N unique inputs exist or `max_calls` calls were
made (then InputGenerationError).
The N inputs are split into train and validation by a seeded hash (`autorl.inputs.dedup.split_train_val`).
A system prompt that fails `autorl.inputs.checks.system_prompt_problem` in every try is replaced by the
task description (`WrittenSystemPrompt.fallback` says why).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import dspy
from pydantic import BaseModel, ConfigDict, Field
from rich.progress import Progress

from ruler.endpoint import ModelEndpoint, use_local_cost_map

from ..errors import AutoRLError
from ..task import TaskSpec
from .checks import SYSTEM_PROMPT_CHARS, junk_reason, system_prompt_problem
from .dedup import DEFAULT_VAL_FRACTION, NEAR_DUPLICATE_THRESHOLD, DedupIndex, split_train_val
from .files import Difficulty, GeneratedInput, GeneratedInputs, GenerationStats

DIFFICULTIES: dict[Difficulty, str] = {
    "easy": "easy: common, typical requests",
    "medium": "medium: requests that need some care or several steps",
    "hard": "hard: tricky, ambiguous or unusual requests and edge cases",
}
LENGTHS = ("short: one sentence", "medium: two to four sentences", "long: a detailed message with context")
SYSTEM_PROMPT_TRIES = 3
"""Calls (with different seeds) for a system prompt that parses and passes the checks, before falling back."""
MIN_YIELD_PER_CALL = 0.5
"""The fewest new unique inputs a call is expected to bring when planning a round of calls."""

logger = logging.getLogger(__name__)


class InputGenerationError(AutoRLError):
    """The generator failed, or gave too few usable inputs within the call budget."""


class GenerationConfig(BaseModel):
    """How inputs are generated, filtered and split (CLI flags override these)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    batch_size: int = Field(5, ge=1, le=50)
    """Inputs asked for in one generator call."""
    max_calls: int | None = Field(None, ge=1)
    """Cap on generator calls for the inputs; None allows max(16, 4 x ceil(N / batch_size)). The floor is for
    small N: with a weak generator, junk and duplicates take most of a call (the embedded model kept 4 of
    6 asked-for inputs in 8 calls)."""
    concurrency: int = Field(4, ge=1)
    """Generator calls in flight at once."""
    temperature: float = Field(0.7, ge=0)
    """Sampling temperature of the generator."""
    max_tokens: int = Field(1200, ge=16)
    """Completion token cap of one call; a reply cut by it does not parse and counts as unusable."""
    min_chars: int = Field(8, ge=1)
    """Shortest input kept, in characters (also the schema's minLength)."""
    max_chars: int = Field(400, ge=16)
    """Schema cap on an input's length in characters; an input that reaches it was cut off and is dropped."""
    avoid_count: int = Field(5, ge=0)
    """Inputs already kept that each call is shown as ones not to repeat."""
    similarity_threshold: float = Field(NEAR_DUPLICATE_THRESHOLD, gt=0, le=1)
    """Character-trigram Jaccard similarity at or above which two inputs are duplicates."""
    val_fraction: float = Field(DEFAULT_VAL_FRACTION, ge=0, lt=1)
    """Share of the inputs held out for validation."""

    def calls_allowed(self, n: int) -> int:
        return self.max_calls or max(16, 4 * math.ceil(n / self.batch_size))


class WriteSystemPrompt(dspy.Signature):
    """Write the system prompt of an AI agent that performs the task. Address the agent as "you"; say
    what it must do, how to approach it, and the exact output format the task asks for. Do not include
    example inputs or answers."""

    task: str = dspy.InputField(desc="what the agent must do")
    system_prompt: str = dspy.OutputField(desc="the system prompt")


class WriteInputs(dspy.Signature):
    """Write new inputs that real users would send to an AI agent doing the task. Each input is one
    complete message to the agent, never an answer. Vary topics, wording and details; match the
    requested difficulty and length; follow the guidance; match the style of the examples without
    copying them; do not repeat any input listed in `avoid`."""

    task: str = dspy.InputField(desc="what the agent does")
    guidance: str = dspy.InputField(desc="extra instructions for the inputs (may be empty)")
    examples: list[str] = dspy.InputField(desc="example inputs showing the style (may be empty)")
    difficulty: str = dspy.InputField(desc="how hard the inputs should be")
    length: str = dspy.InputField(desc="how long each input should be")
    avoid: list[str] = dspy.InputField(desc="inputs already written; write different ones")
    count: int = dspy.InputField(desc="how many inputs to write")
    new_inputs: list[str] = dspy.OutputField(desc="the new inputs, one complete user message each")


_ADAPTER = dspy.JSONAdapter()


def generator_lm(generator: str, **settings: Any) -> tuple[dspy.LM, str]:
    """A `dspy.LM` for the generator, and the model name to record (never an address or a key).

    `generator` is a model spec (`ruler.endpoint`): "embedded", `name@http://host:port/v1` (model `name` on
    an OpenAI-compatible server, sent no key), or a LiteLLM model string (its key read from the provider's
    usual variable). DSPy's response cache is off: the pipeline caches the artifacts.
    """
    use_local_cost_map()  # before DSPy imports LiteLLM
    target = ModelEndpoint.parse(generator).target()
    return dspy.LM(**target.params(), cache=False, **settings), target.name


def _response_format(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def _call_seed(seed: int, purpose: str, attempt: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{purpose}:{attempt}".encode()).digest()[:4], "big") >> 1


def _predict(
    lm: dspy.LM, signature: type[dspy.Signature], inputs: dict[str, Any], response_format: dict, seed: int
) -> dspy.Prediction | None:
    """One structured call; None when the reply does not parse. Generator failures raise."""
    try:
        with dspy.context(lm=lm, adapter=_ADAPTER):
            return dspy.Predict(signature)(**inputs, config={"response_format": response_format, "seed": seed})
    except dspy.AdapterParseError:
        return None
    except dspy.LMError as exc:
        raise InputGenerationError(f"generator call failed: {str(exc).splitlines()[0]}") from None


class WrittenSystemPrompt(NamedTuple):
    """What `generate_system_prompt` returns."""

    text: str
    """The system prompt to use: the generated one, or the task description when `fallback` is set."""
    fallback: str | None
    """Why the last generated prompt failed the checks (`autorl.inputs.checks.system_prompt_problem`) and the
    task description is used instead; None when a generated prompt passed."""


def generate_system_prompt(task: TaskSpec, lm: dspy.LM, seed: int = 0) -> WrittenSystemPrompt:
    """A system prompt for the policy, written by the generator from the task description (the task's own
    `system_prompt`, as written and without a call, when it has one).

    Up to SYSTEM_PROMPT_TRIES calls; the first prompt that passes the checks is used. When the replies
    parse but none passes, the task description is the system prompt (logged as a warning, and
    `fallback` names the reason). Raises InputGenerationError when no reply parses at all.
    """
    if task.system_prompt is not None:
        return WrittenSystemPrompt(task.system_prompt, None)
    low, high = SYSTEM_PROMPT_CHARS
    response_format = _response_format(
        "system_prompt", {"system_prompt": {"type": "string", "minLength": low, "maxLength": high}}
    )
    problem = None
    for attempt in range(1, SYSTEM_PROMPT_TRIES + 1):
        seed_ = _call_seed(seed, "system_prompt", attempt)
        prediction = _predict(lm, WriteSystemPrompt, {"task": task.description}, response_format, seed_)
        if prediction is None:
            continue
        prompt = str(prediction.system_prompt).strip()
        problem = system_prompt_problem(prompt, task)
        if problem is None:
            return WrittenSystemPrompt(prompt, None)
        logger.info("generated system prompt %d rejected: %s", attempt, problem)
    if problem is None:
        raise InputGenerationError(f"the generator wrote no usable system prompt in {SYSTEM_PROMPT_TRIES} calls")
    logger.warning("the generated system prompt is unusable (%s); using the task description instead", problem)
    return WrittenSystemPrompt(task.description, problem)


class _Request(BaseModel):
    """One planned WriteInputs call."""

    attempt: int
    difficulty: Difficulty
    seed: int
    inputs: dict[str, Any]

    @property
    def prompt_hash(self) -> str:
        """SHA-256 prefix of the messages this call sends."""
        messages = _ADAPTER.format(WriteInputs, demos=[], inputs=self.inputs)
        return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


class _InputWriter:
    """Makes the WriteInputs calls for one task and keeps what survives the quality controls."""

    def __init__(
        self, task: TaskSpec, lm: dspy.LM, seed: int, config: GenerationConfig, system_prompt: str | None = None
    ):
        self.task, self.lm, self.seed, self.config = task, lm, seed, config
        self.instructions = [WriteInputs.instructions, *([system_prompt] if system_prompt else [])]
        """Texts besides the task's that an input must not copy."""
        self.index = DedupIndex(config.similarity_threshold)
        for example in task.seed_examples:
            self.index.block(example)
        self.sources: list[_Request] = []
        """The request each kept input came from, parallel to `index.kept`."""
        self.stats = GenerationStats()
        item = {"type": "string", "minLength": config.min_chars, "maxLength": config.max_chars}
        size = config.batch_size
        self.response_format = _response_format(
            "inputs", {"new_inputs": {"type": "array", "items": item, "minItems": size, "maxItems": size}}
        )

    def request(self, attempt: int) -> _Request:
        """The inputs of call number `attempt`, planned from what is kept before the round starts."""
        difficulty = list(DIFFICULTIES)[(attempt - 1) % 3]
        seed = _call_seed(self.seed, "inputs", attempt)
        kept = self.index.kept
        inputs = {
            "task": self.task.description,
            "guidance": self.task.generator_instructions,
            "examples": self.task.seed_examples,
            "difficulty": DIFFICULTIES[difficulty],
            "length": LENGTHS[(attempt - 1) // 3 % 3],
            "avoid": random.Random(seed).sample(kept, min(self.config.avoid_count, len(kept))),
            "count": self.config.batch_size,
        }
        return _Request(attempt=attempt, difficulty=difficulty, seed=seed, inputs=inputs)

    def call(self, request: _Request) -> tuple[_Request, list[str] | None]:
        """The request and its parsed inputs (None when the reply did not parse)."""
        prediction = _predict(self.lm, WriteInputs, request.inputs, self.response_format, request.seed)
        return request, None if prediction is None else [str(text) for text in prediction.new_inputs]

    def keep(self, request: _Request, texts: list[str] | None) -> None:
        self.stats.calls += 1
        if texts is None:
            self.stats.unusable_calls += 1
            return
        for text in texts:
            self.stats.raw += 1
            text = text.strip()
            if not self.config.min_chars <= len(text) < self.config.max_chars:
                self.stats.rejected += 1
            elif reason := junk_reason(text, self.task, self.instructions):
                self.stats.rejected_junk += 1
                logger.debug("input %r rejected: %s", text, reason)
            elif self.index.add(text):
                self.sources.append(request)
            else:
                self.stats.duplicates += 1
        self.stats.unique = len(self.index)


def generate_inputs(
    task: TaskSpec,
    n: int | None = None,
    generator: str = "embedded",
    seed: int = 0,
    config: GenerationConfig | None = None,
    *,
    write_system_prompt: bool = True,
) -> GeneratedInputs:
    """A system prompt and `n` (default `task.num_inputs`) unique inputs split into train and val.

    write_system_prompt: False skips the system prompt (the pipeline makes it in a stage of its own).

    Deterministic for a given generator, seed and config when the generator honours `seed` (vLLM does).
    Raises InputGenerationError if the generator fails, or if `n` unique inputs are not reached within
    `config.calls_allowed(n)` calls.
    """
    config = config or GenerationConfig()
    n = task.num_inputs if n is None else n
    if n <= 0:
        raise AutoRLError(f"the number of inputs must be at least 1, got {n}")
    lm, model_name = generator_lm(generator, temperature=config.temperature, max_tokens=config.max_tokens)
    budget = config.calls_allowed(n)
    with Progress(transient=True) as progress, ThreadPoolExecutor(config.concurrency) as pool:
        written = None
        if write_system_prompt:
            spinner = progress.add_task(f"Writing the system prompt with {model_name}", total=None)
            written = generate_system_prompt(task, lm, seed)
            progress.remove_task(spinner)
        writer = _InputWriter(task, lm, seed, config, written.text if written else None)
        bar = progress.add_task(f"Generating {n} inputs with {model_name}", total=n)
        while len(writer.index) < n and writer.stats.calls < budget:
            # calls for the inputs still missing, at the yield seen so far (a weak generator's calls give
            # junk and duplicates: asking for them in one round beats one slow round after another)
            per_call = writer.stats.unique_per_call if writer.stats.calls else config.batch_size
            wanted = math.ceil((n - len(writer.index)) / max(per_call, MIN_YIELD_PER_CALL))
            first = writer.stats.calls + 1
            attempts = range(first, first + min(config.concurrency, wanted, budget - writer.stats.calls))
            requests = [writer.request(attempt) for attempt in attempts]
            for request, texts in pool.map(writer.call, requests):  # in attempt order: deterministic
                writer.keep(request, texts)
            progress.update(bar, completed=min(n, len(writer.index)))
    stats = writer.stats
    if len(writer.index) < n:
        raise InputGenerationError(
            f"only {stats.unique} of {n} unique inputs after {stats.calls} generator calls ({stats.unusable_calls} "
            f"unparseable replies, {stats.rejected} empty or cut-off inputs, {stats.rejected_junk} junk inputs, "
            f"{stats.duplicates} duplicates); "
            "use a stronger generator, ask for fewer inputs or allow more calls"
        )
    texts = writer.index.kept[:n]
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
    )
