"""The prompts of `autorl benchmark`'s `+optimized` variants, tuned with DSPy's optimizers.

A variant `X+optimized` is X's model answering with a prompt that a DSPy optimizer tuned on the
benchmarked run's train inputs (never the held-out ones), the run's judge as the metric, within
`--optimizer-budget` model calls:

- `bootstrap`: `dspy.BootstrapFewShotWithRandomSearch`. The variant answers pool inputs with its own
  prompt (up to `MAX_ROUNDS` fresh tries each, as the budget allows, until one passes); answers the
  judge scores at least `DEMO_SCORE` become demonstrations; DSPy's random search scores candidate sets
  of 1 to `MAX_DEMOS` of them, and the prompt without any, on the selection inputs. It needs no model
  besides the variant's, so it works with the embedded model alone.
- `gepa`: `dspy.GEPA`. The reflection model (`--reflection-model`) reads answers with the judge's
  explanations and rewrites the instructions (the system prompt); GEPA keeps the candidates that are
  best on some selection input and tries again from them.

The train inputs are split, seeded, into the selection inputs (at most `SELECTION`, which every
candidate prompt answers) and the pool (demonstrations for bootstrap, GEPA's reflection minibatches).
Every answer goes through the agent loop that answers the held-out inputs
(`pipelines.policy.task_rollout`: the task's tools and turns): DSPy's `Predict` calls an
`AgentLoopAdapter`, which makes the signature's instructions the system prompt and each demonstration's
conversation earlier turns.

The metric is the judge. A judge that scores answers on their own (a program judge) scores each
answer; a RULER judge ranks the answers of a group relative to each other, so each answer is judged in
a pair with a reference answer to the same input, made once with the original prompt: every candidate
is scored against the same answers, on one scale. The judge sees each answer under the original
system prompt, so it judges answers, not prompts.

The best candidate is kept only when it scores higher than the original prompt on the selection
inputs; otherwise the variant answers with the original prompt and the results say so. The outcome
(`OptimizedPrompt`) is an artifact `benchmark_prompt/<key>/prompt.json`, keyed by the variant's model
and prompt, the optimizer and its settings, the train inputs, the judge, the rubric and task, and the
rollout settings: a rerun reuses it.

Beside this module: `optimizer_plan` (the settings and the budget), `dspy_session` (DSPy's side of one
optimization), `optimized_prompt` (the outcome and how the results show it).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from autorl.agents.rollout import RolloutConfig
from pipelines.artifacts import ArtifactStore, code_version, stage_key
from pipelines.records.pricing import counted_as, priced
from ruler import Judge, RulerJudge
from ruler.endpoint import ModelEndpoint

from .dspy_session import OptimizationSession, Rollout
from .optimized_prompt import OptimizedPrompt
from .optimizer_plan import OptimizerSettings, make_plan
from .variants import Variant

STAGE = "benchmark_prompt"
FILE = "prompt.json"


def compares(judge: Judge) -> bool:
    """Whether `judge` scores a group's answers relative to each other (RULER, alone or in a combination)."""
    return isinstance(judge, RulerJudge) or any(compares(j) for j in getattr(judge, "judges", ()))


class PromptOptimizer:
    """Tunes the prompts of `+optimized` variants; each outcome is cached in the artifact store."""

    def __init__(
        self,
        settings: OptimizerSettings,
        train: list[str],
        judge: Judge,
        judge_identity: dict[str, str],
        rubric: str,
        task: str | None,
        rollout: RolloutConfig,
        agent_settings: dict[str, Any],
        store: ArtifactStore,
        console: Console,
        run: str,
        price_per_hour: float = 0.0,
    ):
        self.settings, self.train, self.judge, self.rubric, self.task = settings, train, judge, rubric, task
        self.store, self.console, self.price_per_hour = store, console, price_per_hour
        self.judge_model = counted_as(ModelEndpoint.parse(judge_identity["judge"]))
        """The name the judge's tokens are counted under (a program judge makes no model call)."""
        self.relative = compares(judge)
        self.plan = make_plan(settings, train, self.relative, run)
        self.paths: dict[str, Path] = {}
        """Each tuned variant's artifact file, by label."""
        self._identity = {
            "settings": asdict(settings),
            "train": train,
            "judge": judge_identity,
            "rubric": rubric,
            "task": task,
            "rollout": rollout.model_dump(),
            **agent_settings,
        }

    def describe(self) -> str:
        """The optimizer's settings, for the results' header."""
        what = (
            f"up to {self.plan.rounds} tries per pool input for a demonstration, {self.plan.candidates} candidate prompts"
            if self.settings.optimizer == "bootstrap"
            else f"at most {self.plan.metric_calls} judged answers, reflection model `{self.settings.reflection_model}`"
        )
        return (
            f"+optimized variants: {self.settings.optimizer} on {len(self.train)} train inputs "
            f"({len(self.plan.selection)} to score candidates on), {what}, budget {self.settings.budget} model calls."
        )

    def key(self, variant: Variant) -> str:
        """The key of a variant's optimized prompt (from the variant before it is tuned)."""
        config = {"variant": variant.identity, "system_prompt": variant.system_prompt, **self._identity}
        return stage_key(STAGE, config, code_version(sys.modules[__name__]), {})

    def apply_cached(self, variant: Variant) -> bool:
        """Give `variant` its optimized prompt from the cache; False when there is none yet."""
        key = self.key(variant)
        if not self.store.exists(STAGE, key):
            return False
        self._apply(variant, OptimizedPrompt.model_validate_json((self.store.path(STAGE, key) / FILE).read_text()), key)
        return True

    async def optimize(
        self, variant: Variant, rollout: Rollout, tools: list[dict] | None, calls: Counter, answered_as: tuple[str, str]
    ) -> Counter:
        """Tune `variant`'s prompt with answers from `rollout` (the variant's model through the agent loop,
        its tokens priced as `answered_as`: kind, model); cache the outcome, priced, and give it to the variant.
        `calls` counts this process's model calls. Returns the optimization's tokens (`OptimizationSession.tokens`)."""
        key = self.key(variant)
        self.console.print(f"variant {variant.label}: tuning its prompt ({self.settings.optimizer})", highlight=False)
        loop = asyncio.get_running_loop()
        session = OptimizationSession(self, variant.system_prompt, rollout, tools, loop, calls, answered_as)
        started = time.monotonic()
        result = await asyncio.to_thread(session.optimize)
        result.seconds = round(time.monotonic() - started, 2)
        result.calls = dict(session.calls)
        result.spent = priced(result.seconds, session.tokens, self.price_per_hour)
        with self.store.write(STAGE, key, {"variant": variant.identity, "optimizer": self.settings.optimizer}) as out:
            (out / FILE).write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
        self._apply(variant, result, key)
        return session.tokens

    def _apply(self, variant: Variant, result: OptimizedPrompt, key: str) -> None:
        self.paths[variant.label] = self.store.path(STAGE, key) / FILE
        variant.system_prompt, variant.demos, variant.optimized = result.system_prompt, result.demos, result
        variant.cost = variant.cost.plus(result.cost)
        style = "" if result.improved else "[yellow]"
        self.console.print(f"{style}variant {variant.label}: {result.summary()}", highlight=False)
