"""Agent variants for `autorl benchmark`: what a variant name means (`resolve`), and the recorded runs they
come from (`RunView`). `pipelines.benchmarking.answers` has them answer the inputs.

A variant is written as one of
    base                        the benchmarked run's base model, without a LoRA
    RUN@latest, RUN@best        a run's newest checkpoint, or its best (`train.best_step`: by validation during training)
    RUN@0005 (or RUN@5)         a run's checkpoint of step 5
    provider/model              any LiteLLM model (openai/gpt-4.1-mini; the key comes from the provider's variable)
    name@http://host:port/v1    model `name` on any OpenAI-compatible server (it is sent no key)
optionally followed by `+prompt=FILE`: the same model with the system prompt in FILE. Otherwise a
checkpoint answers with its own run's system prompt, and `base` and API models with the benchmarked run's.
Any of these may end in `+optimized`: the same model with that prompt tuned on the benchmarked run's train
inputs (`pipelines.benchmarking.optimize`).

Each variant has a cost (`Cost`): what making it took, in model calls and seconds. A plain variant costs 0,
a checkpoint its training steps (the train stage records each step's, `records.step_costs.training_cost`), an optimized
prompt the optimizer's calls, on top of its model's.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorl.errors import AutoRLError
from autorl.inputs.files import read_input_rows
from autorl.redaction import redact_text, redacted
from pipelines.records import step_costs
from pipelines.records.pricing import added
from pipelines.run_view import RunView
from ruler.endpoint import ModelEndpoint
from ruler.errors import ModelSpecError

PROMPT_SUFFIX = "+prompt="
OPTIMIZED_SUFFIX = "+optimized"
FORMS = (
    "base, RUN@latest, RUN@best, RUN@NNNN, provider/model (LiteLLM) or name@http://host:port/v1, "
    f"each optionally followed by {PROMPT_SUFFIX}FILE, then optionally {OPTIMIZED_SUFFIX}"
)
_CHECKPOINT = re.compile(r"^(?P<run>[^@/\s]+)@(?P<which>[^@/\s]+)$")


@dataclass(frozen=True)
class Cost:
    """What making a variant took."""

    calls: int | None = 0
    """Model calls (training: rollouts and judge calls; an optimizer: answers, judge and reflection calls);
    None where they were not recorded."""
    seconds: float | None = 0.0
    """Wall-clock seconds; None where they were not recorded."""
    made_by: str = ""
    """How it was made: training steps, an optimizer; empty for a plain variant."""
    usd: float | None = 0.0
    """USD (`pipelines.costs`: its training steps' recorded spending); None where it was not recorded."""

    def plus(self, other: Cost) -> Cost:
        """Both costs: a variant made on top of another (an optimized prompt for a checkpoint)."""
        calls = None if self.calls is None or other.calls is None else self.calls + other.calls
        seconds = None if self.seconds is None or other.seconds is None else self.seconds + other.seconds
        usd = None if self.usd is None or other.usd is None else self.usd + other.usd
        return Cost(calls, seconds, " + ".join(filter(None, [self.made_by, other.made_by])), usd)


@dataclass
class Variant:
    """One resolved variant: what answers, with which system prompt."""

    label: str
    """The variant as written on the command line (a URL's credentials redacted); its name in every table."""
    system_prompt: str
    identity: dict[str, Any]
    """What its answers depend on besides the prompt, input and sampling (never a key)."""
    run: RunView | None = None
    """For the base model and checkpoints: the run whose server serves it."""
    step: int = 0
    """For a run's variant: the checkpoint step (0: the base model)."""
    api: ModelEndpoint | None = None
    """For an API model: the model, and its endpoint when it is `name@URL`."""
    optimize: bool = False
    """Whether its prompt is tuned first (`+optimized`); once tuned, `system_prompt` and `demos` are the tuned ones."""
    demos: list[dict[str, Any]] = field(default_factory=list)
    """Earlier turns shown before each input (an optimized prompt's demonstrations)."""
    optimized: Any = None
    """The `optimized_prompt.OptimizedPrompt` it answers with, once tuned."""
    cost: Cost = field(default_factory=Cost)


def parse_variants(text: str) -> list[str]:
    """The comma-separated variants of `--variants`, each once."""
    labels = [part.strip() for part in text.split(",") if part.strip()]
    if not labels:
        raise AutoRLError(f"--variants is empty; give one or more of: {FORMS}")
    if repeated := [label for label, count in Counter(labels).items() if count > 1]:
        raise AutoRLError(f"variant {repeated[0]!r} is given twice")
    return labels


def read_input_texts(path: Path) -> list[str]:
    """The `input` field of every row of a JSONL file (`autorl.inputs.files.read_input_rows`; other fields are
    ignored), each text once."""
    return list(dict.fromkeys(row.input for row in read_input_rows(path)))


def resolve(label: str, main: RunView, runs: dict[str, RunView]) -> Variant:
    """The variant `label` names; `runs` holds the runs opened so far (by name) and gains any other it names.

    Raises an `AutoRLError` naming the variant and what exists when it resolves to nothing.
    """
    body = label.removesuffix(OPTIMIZED_SUFFIX)
    if not body or body.endswith("+"):
        raise AutoRLError(
            f"variant {label!r}: {OPTIMIZED_SUFFIX} tunes a variant's system prompt, and names none; put a variant "
            f"before it: {FORMS}"
        )
    if OPTIMIZED_SUFFIX in body:
        raise AutoRLError(f"variant {label!r}: {OPTIMIZED_SUFFIX} goes once, at the end")
    spec, _, prompt_file = body.partition(PROMPT_SUFFIX)
    if spec == "base":
        variant = Variant(label, main.system_prompt(), {"base_model": main.config.model, "lora": None}, main, 0)
    elif "/" in spec:  # provider/model, or name@http://host:port/v1
        api = _api_model(label, spec)
        identity = redacted(api.model_dump(include={"model", "base_url"}))  # a URL's credentials are no identity
        variant = Variant(redact_text(label), main.system_prompt(), identity, api=api)
    elif match := _CHECKPOINT.match(spec):
        if match["run"] not in runs:
            try:
                runs[match["run"]] = RunView(main.home, match["run"], main.calls)
            except AutoRLError as exc:
                raise AutoRLError(f"variant {label!r}: {exc}") from None
        run = runs[match["run"]]
        step = _checkpoint_step(run, match["which"], label)
        lora = run.checkpoint_dir(step) / "adapter_model.safetensors"
        identity = {"base_model": run.config.model, "lora": hashlib.sha256(lora.read_bytes()).hexdigest()[:20]}
        calls, seconds = step_costs.training_cost(run, step) or (None, None)
        spent = step_costs.steps_cost(run.policy.run_dir, step)
        usd = added(spent)["usd"]["total"] if len(spent) == step else None
        cost = Cost(calls, seconds, f"{step} training steps", usd)
        variant = Variant(label, run.system_prompt(), identity, run, step, cost=cost)
    else:
        raise AutoRLError(f"variant {label!r} resolves to nothing; use {FORMS}")
    if prompt_file:
        variant.system_prompt = _read_prompt(Path(prompt_file), label)
    variant.optimize = body != label
    return variant


def _api_model(label: str, spec: str) -> ModelEndpoint:
    try:
        model = ModelEndpoint.parse(spec)
        model.check_provider()
    except ModelSpecError:
        raise AutoRLError(
            f"variant {label!r} resolves to nothing (no known LiteLLM provider/model, nor name@URL); use {FORMS}"
        ) from None
    return model


def _checkpoint_step(run: RunView, which: str, label: str) -> int:
    try:
        return run.checkpoint_step(which)
    except AutoRLError as exc:
        raise AutoRLError(f"variant {label!r}: {exc}") from None


def _read_prompt(path: Path, label: str) -> str:
    if not path.is_file():
        raise AutoRLError(f"variant {label!r}: system prompt file {path} does not exist")
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise AutoRLError(f"variant {label!r}: system prompt file {path} is empty")
    return text
