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
(`pipelines.context.task_rollout`: the task's tools and turns): DSPy's `Predict` calls an
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
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import math
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import dspy
from pydantic import BaseModel, Field
from rich.console import Console

from autorl.agents.rollout import RolloutConfig
from autorl.errors import AutoRLError
from autorl.inputs.checks import SYSTEM_PROMPT_CHARS
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.artifacts import ArtifactStore, canonical_json, code_version, stage_key
from ruler import Judge, RulerJudge, ruler_score_group
from ruler.endpoint import ModelEndpoint, use_local_cost_map

from .config import BenchmarkConfig
from .variants import Cost, Variant

STAGE = "benchmark_prompt"
FILE = "prompt.json"
PROMPTS = "prompts.json"
"""The benchmark's file of the optimized prompts it used (`write_prompts`), beside results.md."""
SELECTION = 12
"""Most train inputs each candidate prompt is scored on (half the train inputs when there are fewer)."""
MIN_TRAIN = 4
"""Fewest train inputs to optimize on: two to score candidates on, two to draw from."""
MAX_DEMOS = 4
"""Most demonstrations bootstrap puts before the input."""
DEMO_SCORE = 0.5
"""The judge's score an answer needs to become a demonstration (judges score 0 to 1)."""
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
REFLECTION_MAX_TOKENS = 4000
"""Completion token cap of one reflection call."""
THREADS = 8
"""Answers DSPy asks for at once."""
TIE = 1e-9

logger = logging.getLogger(__name__)
_PRINTING = threading.Lock()
"""DSPy's bootstrap prints to stdout, where `autorl benchmark` prints its table: one optimization at a time
runs with stdout captured (swapping `sys.stdout` from two threads at once would leave it swapped)."""

Rollout = Callable[[str, list[dict[str, Any]], str], Awaitable[Trajectory]]
"""One answer through the agent loop: (system prompt, earlier turns, input) -> the trajectory."""


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


class OptimizedPrompt(BaseModel):
    """What the optimizer made of a variant's prompt (the artifact), and what that took."""

    optimizer: str
    system_prompt: str
    """The system prompt the variant answers with."""
    demos: list[dict[str, Any]] = Field(default_factory=list)
    """Earlier turns shown before each input (bootstrap's demonstrations), as chat messages."""
    improved: bool
    """Whether a candidate scored higher than the original prompt; if not, the prompt is the original."""
    original_score: float
    """The original prompt's mean score on the selection inputs."""
    score: float
    """The kept prompt's mean score on the selection inputs."""
    best_score: float
    """The best candidate's mean score on the selection inputs (the kept prompt's, when it improved)."""
    selection_inputs: int
    candidates: int
    """Candidate prompts scored on the selection inputs, the original included."""
    calls: dict[str, int]
    """Model calls made, by kind: policy (the variant's answers), judge, reflection."""
    seconds: float

    @property
    def cost(self) -> Cost:
        outcome = "tuned" if self.improved else "kept the original"
        return Cost(sum(self.calls.values()), self.seconds, f"{self.optimizer} ({outcome})")

    def summary(self) -> str:
        """One line: what the optimizer found, on what, at what cost."""
        inputs = f"on {self.selection_inputs} train inputs"
        made = f"{self.candidates} candidates, {sum(self.calls.values())} model calls, {self.seconds:.0f} s"
        if not self.improved:
            return (
                f"{self.optimizer} found no prompt better than the original (best candidate {self.best_score:.3f}, "
                f"the original {self.original_score:.3f} {inputs}; {made}): it answers with the original"
            )
        what = f"{len(demos_of(self.demos))} demonstrations" if self.demos else "new instructions"
        return f"{self.optimizer} kept {what}: {self.score:.3f} vs the original's {self.original_score:.3f} {inputs} ({made})"


def demos_of(turns: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Earlier turns split into demonstrations, each starting at a user message."""
    demos: list[list[dict[str, Any]]] = []
    for message in turns:
        if message.get("role") == "user" or not demos:
            demos.append([])
        demos[-1].append(message)
    return demos


def markdown(label: str, result: OptimizedPrompt, path: Path) -> str:
    """The results.md section of an optimized variant: the outcome, the prompt and demonstrations."""
    lines = [f"### {label}", "", result.summary() + f". Artifact: `{path}`.", "", "System prompt:", ""]
    lines += _quoted(result.system_prompt)
    for number, demo in enumerate(demos_of(result.demos), 1):
        lines += ["", f"Demonstration {number} (earlier turns before each input):", ""]
        for message in demo:
            lines += _quoted(f"{message['role']}: {message.get('content') or ''}")
    return "\n".join(lines)


def write_prompts(path: Path, tuned: dict[str, tuple[OptimizedPrompt, Path]]) -> None:
    """Each optimized variant's prompt (`OptimizedPrompt`) and its artifact file, by label, as JSON."""
    records = {label: {"artifact": str(file), **result.model_dump()} for label, (result, file) in tuned.items()}
    path.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")


def _quoted(text: str) -> list[str]:
    return ["> " + line if line else ">" for line in text.splitlines() or [""]]


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
    ):
        self.settings, self.train, self.judge, self.rubric, self.task = settings, train, judge, rubric, task
        self.store, self.console = store, console
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

    async def optimize(self, variant: Variant, rollout: Rollout, tools: list[dict] | None, calls: Counter) -> None:
        """Tune `variant`'s prompt with answers from `rollout` (the variant's model through the agent loop);
        cache the outcome and give it to the variant. `calls` counts this process's model calls."""
        key = self.key(variant)
        self.console.print(f"variant {variant.label}: tuning its prompt ({self.settings.optimizer})", highlight=False)
        session = _Session(self, variant.system_prompt, rollout, tools, asyncio.get_running_loop(), calls)
        started = time.monotonic()
        result = await asyncio.to_thread(session.optimize)
        result.seconds = round(time.monotonic() - started, 2)
        result.calls = dict(session.calls)
        with self.store.write(STAGE, key, {"variant": variant.identity, "optimizer": self.settings.optimizer}) as out:
            (out / FILE).write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
        self._apply(variant, result, key)

    def _apply(self, variant: Variant, result: OptimizedPrompt, key: str) -> None:
        self.paths[variant.label] = self.store.path(STAGE, key) / FILE
        variant.system_prompt, variant.demos, variant.optimized = result.system_prompt, result.demos, result
        variant.cost = variant.cost.plus(result.cost)
        style = "" if result.improved else "[yellow]"
        self.console.print(f"{style}variant {variant.label}: {result.summary()}", highlight=False)


class _Answer(dspy.Signature):
    """(the variant's system prompt)"""

    input: str = dspy.InputField()
    answer: str = dspy.OutputField()


class AgentProgram(dspy.Module):
    """The DSPy program an optimizer tunes: one `Predict` whose instructions are the system prompt and whose
    demos are demonstrations, answered through autorl's agent loop (`AgentLoopAdapter`)."""

    def __init__(self, system_prompt: str):
        super().__init__()
        self.answer = dspy.Predict(_Answer.with_instructions(system_prompt))

    def forward(self, input: str) -> dspy.Prediction:  # DSPy passes the signature's field names
        with dspy.context(adapter=_ADAPTER):  # only here: GEPA's reflection calls keep their own adapter
            return self.answer(input=input)


class AgentLM(dspy.BaseLM):
    """The variant's model as DSPy's LM: `converse(system prompt, earlier turns, input, tag)` answers through
    the agent loop and returns the conversation from the input on (the same request and tag: the same answer)."""

    def __init__(self, converse: Callable[[str, list[dict[str, Any]], str, str], list[dict[str, Any]]]):
        super().__init__(model="autorl-agent-loop")
        self.converse = converse


class AgentLoopAdapter(dspy.Adapter):
    """Has DSPy's `Predict` answer through the agent loop: the signature's instructions are the system prompt,
    the demos' conversations earlier turns, the `input` field the user message. The outputs are `answer` (the
    last assistant text) and `conversation` (the turns from the input on, tool calls included), which a
    demonstration made from this answer shows."""

    def __call__(
        self, lm: AgentLM, lm_kwargs: dict, signature: type[dspy.Signature], demos: list, inputs: dict
    ) -> list[dict[str, Any]]:
        earlier = [message for demo in demos for message in demo.get("conversation") or []]
        draw = lm.kwargs.get("rollout_id")  # bootstrap's later rounds ask for a fresh answer
        conversation = lm.converse(signature.instructions, earlier, inputs["input"], f"draw {draw}" if draw else "")
        return [{"answer": last_answer(conversation), "conversation": conversation}]


_ADAPTER = AgentLoopAdapter()


def last_answer(conversation: list[dict[str, Any]]) -> str:
    replies = [m for m in conversation if m.get("role") == "assistant"]
    return (replies[-1].get("content") or "") if replies else ""


class _Session:
    """One optimization: DSPy runs on a worker thread; answers and judge calls run on the event loop.

    Identical requests (same prompt, earlier turns and input) are answered once, as DSPy's LM cache would;
    judge scores are kept per answer."""

    def __init__(
        self,
        owner: PromptOptimizer,
        system_prompt: str,
        rollout: Rollout,
        tools: list[dict] | None,
        loop: asyncio.AbstractEventLoop,
        process_calls: Counter,
    ):
        self.owner, self.system_prompt, self.rollout, self.tools = owner, system_prompt, rollout, tools
        self.loop, self.process_calls = loop, process_calls
        self.calls: Counter = Counter()
        self._answers: dict[str, list[dict[str, Any]]] = {}
        self._scores: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def _count(self, kind: str, number: int = 1) -> None:
        """Count model calls; the variant's answers are counted in the process's calls by `rollout` itself."""
        if not number:
            return
        with self._lock:
            self.calls[kind] += number
            if kind != "policy":
                self.process_calls[kind] += number

    def converse(self, system_prompt: str, earlier: list[dict[str, Any]], text: str, tag: str = "") -> list[dict]:
        key = canonical_json([system_prompt, earlier, text, tag])
        with self._lock:
            if key in self._answers:
                return self._answers[key]
        trajectory = self._run(self.rollout(system_prompt, earlier, text))
        self._count("policy")
        conversation = trajectory.messages()[1 + len(earlier) :]
        with self._lock:
            self._answers[key] = conversation
        return conversation

    def score(self, text: str, conversation: list[dict[str, Any]]) -> tuple[float, str]:
        """The judge's score of an answer to `text` and its explanation (a RULER judge: beside the reference)."""
        key = canonical_json([text, conversation])
        with self._lock:
            if key in self._scores:
                return self._scores[key]
        judged = [self._trajectory(conversation)]
        if self.owner.relative:
            reference = self.converse(self.system_prompt, [], text, tag="reference")
            judged.insert(0, self._trajectory(reference))
        owner = self.owner
        scored = self._run(ruler_score_group(TrajectoryGroup(judged), owner.judge, owner.rubric, task=owner.task))
        attempts = int(scored.trajectories[-1].metrics.get("ruler_attempts", 0))
        self._count("judge", attempts)
        answer = scored.trajectories[-1]
        result = (float(answer.reward), answer.logs[-1] if answer.logs else "")
        with self._lock:
            self._scores[key] = result
        return result

    def _trajectory(self, conversation: list[dict[str, Any]]) -> Trajectory:
        system = {"role": "system", "content": self.system_prompt}  # the judge judges answers, not prompts
        return Trajectory(messages_and_choices=[system, *conversation], tools=self.tools)

    def metric(self, example: dspy.Example, prediction: dspy.Prediction, trace: Any = None) -> float:
        return self.score(example.input, prediction.conversation)[0]

    def feedback(
        self, example: dspy.Example, prediction: dspy.Prediction, trace: Any = None, name: Any = None, own: Any = None
    ) -> dspy.Prediction:
        """GEPA's metric: the score, and the judge's explanation as feedback for the reflection model."""
        score, explanation = self.score(example.input, prediction.conversation)
        return dspy.Prediction(score=score, feedback=f"The judge gave {score:.3f}: {explanation}")

    def optimize(self) -> OptimizedPrompt:
        """Run the optimizer (on this worker thread); DSPy's prints go to the debug log."""
        plan = self.owner.plan
        pool, selection = (
            [dspy.Example(input=t).with_inputs("input") for t in texts] for texts in (plan.pool, plan.selection)
        )
        printed = io.StringIO()
        with (
            _PRINTING,
            contextlib.redirect_stdout(printed),
            dspy.context(lm=AgentLM(self.converse), num_threads=THREADS),
        ):
            optimize = self._bootstrap if self.owner.settings.optimizer == "bootstrap" else self._gepa
            result = optimize(pool, selection)
        logger.debug("DSPy printed:\n%s", printed.getvalue())
        return result

    def _bootstrap(self, pool: list[dspy.Example], selection: list[dspy.Example]) -> OptimizedPrompt:
        random_sets = self.owner.plan.candidates - 2
        optimizer = dspy.BootstrapFewShotWithRandomSearch(
            metric=self.metric,
            metric_threshold=DEMO_SCORE,
            max_bootstrapped_demos=MAX_DEMOS,
            max_labeled_demos=0,  # the inputs have no reference answers: demonstrations come from the variant
            num_candidate_programs=random_sets,
            max_rounds=self.owner.plan.rounds,
            num_threads=THREADS,
        )
        seeds = {-3, -1, *range(random_sets)}  # -3: the original prompt; -2 (labeled demos only) has none here
        best = optimizer.compile(AgentProgram(self.system_prompt), trainset=pool, valset=selection, restrict=seeds)
        candidates = best.candidate_programs  # best first; a tie keeps DSPy's order, the original first
        original, top = next(c for c in candidates if c["seed"] == -3), candidates[0]
        improved = top["seed"] != -3 and _mean(top["subscores"]) > _mean(original["subscores"]) + TIE
        kept = top if improved else original
        demos = [m for demo in kept["program"].answer.demos for m in demo.get("conversation") or []]
        scores = [_mean(c["subscores"]) for c in (original, kept, top)]
        return self._result(self.system_prompt, demos, improved, scores, len(candidates))

    def _gepa(self, pool: list[dspy.Example], selection: list[dspy.Example]) -> OptimizedPrompt:
        from dspy.teleprompt.gepa.instruction_proposal import InstructionProposer

        settings = self.owner.settings
        reflection = reflection_lm(settings.reflection_model)
        optimizer = dspy.GEPA(
            metric=self.feedback,
            max_metric_calls=self.owner.plan.metric_calls,
            reflection_lm=reflection,
            instruction_proposer=InstructionProposer(max_chars=SYSTEM_PROMPT_CHARS[1] - 1),
            reflection_minibatch_size=MINIBATCH,
            use_merge=False,
            num_threads=THREADS,
            track_stats=True,
            seed=settings.seed,
        )
        try:
            compiled = optimizer.compile(AgentProgram(self.system_prompt), trainset=pool, valset=selection)
        finally:
            self._count("reflection", len(reflection.history))
        results = compiled.detailed_results
        best, scores = results.best_idx, results.val_aggregate_scores
        improved = best != 0 and scores[best] > scores[0] + TIE
        index = best if improved else 0
        prompt = results.candidates[index].answer.signature.instructions
        means = [_mean(list(results.val_subscores[i].values())) for i in (0, index, best)]
        return self._result(prompt, [], improved, means, len(results.candidates))

    def _result(
        self, prompt: str, demos: list[dict], improved: bool, scores: list[float], candidates: int
    ) -> OptimizedPrompt:
        """The outcome; `scores`: the original prompt's, the kept one's and the best candidate's mean scores."""
        original, kept, best = scores
        return OptimizedPrompt(
            optimizer=self.owner.settings.optimizer,
            system_prompt=prompt,
            demos=demos,
            improved=improved,
            original_score=original,
            score=kept,
            best_score=best,
            selection_inputs=len(self.owner.plan.selection),
            candidates=candidates,
            calls={},
            seconds=0.0,
        )


def _mean(values: list[float]) -> float:
    numbers = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return statistics.fmean(numbers) if numbers else 0.0


def reflection_lm(spec: str) -> Any:
    """The `dspy.LM` GEPA reflects with: the model spec `spec` (`ruler.endpoint`: embedded, name@URL or a
    LiteLLM model), sampled at temperature 1; DSPy's response cache off (the artifact store caches)."""
    use_local_cost_map()  # before DSPy imports LiteLLM
    target = ModelEndpoint.parse(spec).target()
    return dspy.LM(**target.params(), cache=False, temperature=1.0, max_tokens=REFLECTION_MAX_TOKENS)
