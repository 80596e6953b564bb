"""How a `+optimized` variant's optimizer spends its budget: the user's optimizer settings, checked, and the
plan (`make_plan`) that splits the train inputs into selection inputs and a pool and counts the candidates
or judged answers the budget allows. Apart from `optimize` so the budget arithmetic reads on its own."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from autorl.errors import AutoRLError
from ruler.endpoint import ModelEndpoint

from .config import BenchmarkConfig

SELECTION = 12
"""Most train inputs each candidate prompt is scored on (half the train inputs when there are fewer)."""
MIN_TRAIN = 4
"""Fewest train inputs to optimize on: two to score candidates on, two to draw from."""
MAX_CANDIDATES = 18
"""Most candidate prompts bootstrap scores: the original, DSPy's unshuffled set and 16 random ones."""
MAX_ROUNDS = 3
"""Most tries bootstrap gives each pool input for an answer good enough to show (DSPy's `max_rounds`): as
many as leave room for `ROUNDS_LEAVE` candidates. A small model's good answers are rare, so one try each
may find none."""
ROUNDS_LEAVE = 4
"""Candidates (the original included) that extra tries may not crowd out of the budget."""
MINIBATCH = 3
"""Inputs of one GEPA reflection step (GEPA's default)."""


@dataclass(frozen=True)
class OptimizerSettings:
    """What an optimized prompt depends on besides the variant, the train inputs and the judge."""

    optimizer: Literal["bootstrap", "gepa"]
    budget: int
    reflection_model: str | None
    seed: int

    @classmethod
    def from_config(cls, config: BenchmarkConfig, seed: int) -> OptimizerSettings:
        """The settings `config` asks for; raises the user's mistakes (GEPA without a reflection model, a
        reflection model nothing uses, a spec that names no model) as one `AutoRLError` line."""
        optimizer = config.optimizer or ("gepa" if config.reflection_model else "bootstrap")
        if optimizer == "gepa" and not config.reflection_model:
            raise AutoRLError("--optimizer gepa needs --reflection-model: the model that rewrites the prompt")
        if optimizer == "bootstrap" and config.reflection_model:
            raise AutoRLError("--reflection-model is used by --optimizer gepa only; bootstrap needs no other model")
        if config.reflection_model:
            ModelEndpoint.parse(config.reflection_model).check_provider()
        return cls(optimizer, config.optimizer_budget, config.reflection_model, seed)


@dataclass(frozen=True)
class Plan:
    """How the optimizer spends its budget."""

    selection: list[str]
    """The train inputs every candidate prompt answers."""
    pool: list[str]
    """The other train inputs: bootstrap's demonstrations, GEPA's reflection minibatches."""
    candidates: int
    """bootstrap: candidate prompts scored, the original included."""
    metric_calls: int
    """gepa: its `max_metric_calls` (answers judged)."""
    rounds: int = 1
    """bootstrap: tries per pool input for a demonstration."""


def make_plan(settings: OptimizerSettings, train: list[str], relative: bool, run: str) -> Plan:
    """The split of `train` and the number of candidates that keep the optimizer within its budget, counting
    each answer, each judge call (one per answer for a RULER judge, `relative`, and one reference answer per
    train input) and each reflection call. Raises an `AutoRLError` when the budget or the inputs are too few."""
    if len(train) < MIN_TRAIN:
        raise AutoRLError(
            f"+optimized needs at least {MIN_TRAIN} train inputs to tune a prompt on; run {run!r} has {len(train)}"
        )
    order = sorted(train)
    random.Random(settings.seed).shuffle(order)
    size = min(SELECTION, len(order) // 2)
    selection, pool = order[:size], order[size:]
    per_answer, references = 1 + relative, relative * len(order)
    budget = settings.budget
    if settings.optimizer == "bootstrap":

        def candidates_with(rounds: int) -> int:  # each pool input answered up to `rounds` times
            return (budget - references - per_answer * len(pool) * rounds) // (per_answer * size)

        rounds = next((r for r in range(MAX_ROUNDS, 1, -1) if candidates_with(r) >= ROUNDS_LEAVE), 1)
        candidates, fixed = candidates_with(rounds), references + per_answer * len(pool)
        if candidates < 2:
            raise AutoRLError(
                f"--optimizer-budget {budget} is too small for bootstrap on the {len(order)} train inputs of run "
                f"{run!r}: it needs at least {fixed + 2 * per_answer * size} model calls (the variant answers the "
                f"{len(pool)} pool inputs, then the original prompt and one candidate answer {size} inputs"
                + (", each answer judged by RULER beside a reference answer)" if relative else ")")
            )
        return Plan(selection, pool, min(candidates, MAX_CANDIDATES), 0, rounds)
    overshoot = 2 * MINIBATCH + size  # GEPA checks its budget between steps; a step judges at most this many

    def total(metric_calls: int) -> int:
        reflections = 2 * (metric_calls // (2 * MINIBATCH) + 1)  # a proposal, and one to shorten it if too long
        return references + per_answer * (metric_calls + overshoot) + reflections

    metric_calls = next((m for m in range(budget, -1, -1) if total(m) <= budget), 0)
    if metric_calls < size + 2 * MINIBATCH:
        need = total(size + 2 * MINIBATCH)
        raise AutoRLError(
            f"--optimizer-budget {budget} is too small for gepa on the {len(order)} train inputs of run {run!r}: it "
            f"needs at least {need} model calls (the original prompt answers {size} inputs, then one reflection step)"
        )
    return Plan(selection, pool, 0, metric_calls)
