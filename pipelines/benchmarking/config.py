"""`BenchmarkConfig`: what `autorl benchmark` compares; its fields are the command's options (`pipelines.cli`).

A module of its own, light to import, so that the CLI can build its options from the fields without
loading the benchmark itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autorl.errors import AutoRLError
from pipelines.config import DEFAULT_HOME, check_run_name


class BenchmarkConfig(BaseModel):
    """What `autorl benchmark` compares, on which inputs, judged by whom."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run: str
    """The benchmarked run: its base model, system prompt, validation inputs and judge are the defaults."""
    variants: list[str] = Field(default_factory=list)
    """The variants: base, RUN@latest, RUN@best, RUN@NNNN, provider/model or name@http://host:port/v1, each
    optionally with +prompt=FILE for another system prompt, then optionally +optimized for its prompt tuned
    on the run's train inputs (--optimizer); unset: base and RUN@latest. What each name means:
    `pipelines.benchmarking.variants`."""
    home: Path = DEFAULT_HOME
    """Where runs and the artifact cache live."""
    out: Path | None = None
    """Directory for results.md, results.csv, winrates.csv, scores.csv, scores.png (and prompts.json with +optimized
    variants); unset: HOME/runs/RUN/benchmark."""
    inputs: Path | None = None
    """JSONL file whose rows' `input` fields are the inputs; unset: the run's validation split."""
    judge: str | None = None
    """RULER judge model (embedded, openai/gpt-4.1-mini, name@URL) or module:attribute; unset: the run's judge."""
    samples: int = Field(1, ge=1)
    """Answers per variant and input (their scores are averaged per input)."""
    max_tokens: int | None = Field(None, ge=1)
    """Completion token cap per answer; unset: the run's."""
    optimizer: Literal["bootstrap", "gepa"] | None = None
    """How a +optimized variant's prompt is tuned on the run's train inputs, the judge as the metric: bootstrap
    (DSPy's BootstrapFewShotWithRandomSearch: demonstrations from the variant's own best-judged answers) or gepa
    (DSPy's GEPA: the reflection model rewrites the instructions); unset: gepa with --reflection-model, else
    bootstrap. How: `pipelines.benchmarking.optimize`."""
    optimizer_budget: int = Field(100, ge=1)
    """Most model calls the optimizer makes per +optimized variant (the variant's answers, the judge's and the
    reflection model's calls)."""
    reflection_model: str | None = None
    """The model GEPA reflects with (provider/model, name@URL or embedded): it reads judged answers and writes
    new instructions."""
    price_per_hour: float = Field(0.0, ge=0)
    """USD per hour of this machine (local models' answers and judging are priced by their seconds); API models'
    tokens are priced at LiteLLM's price table. Prices what this benchmark spends and what an optimized
    prompt costs to make; a checkpoint's cost is its training steps' as the run priced them."""

    @field_validator("run")
    @classmethod
    def _a_run_name(cls, name: str) -> str:
        try:
            return check_run_name(name)
        except AutoRLError as exc:
            raise ValueError(str(exc)) from None
