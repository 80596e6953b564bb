"""DSPy's side of one prompt optimization (`OptimizationSession`): the DSPy program an optimizer tunes, the
adapter and LM that answer its calls through autorl's agent loop, the judge as the metric, and the runs of
`dspy.BootstrapFewShotWithRandomSearch` and `dspy.GEPA`. `optimize.PromptOptimizer` makes one per variant."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import math
import statistics
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import dspy

from autorl.inputs.checks import SYSTEM_PROMPT_CHARS
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.artifacts import canonical_json
from pipelines.records.pricing import counted_as
from ruler import Judge, ruler_score_group
from ruler.endpoint import ModelEndpoint, use_local_cost_map

from .optimized_prompt import OptimizedPrompt
from .optimizer_plan import MINIBATCH, OptimizerSettings, Plan

MAX_DEMOS = 4
"""Most demonstrations bootstrap puts before the input."""
DEMO_SCORE = 0.5
"""The judge's score an answer needs to become a demonstration (judges score 0 to 1)."""
REFLECTION_MAX_TOKENS = 4000
"""Completion token cap of one reflection call."""
THREADS = 8
"""Answers DSPy asks for at once."""


class SessionOwner(Protocol):
    """What a session reads of the optimizer that made it (`optimize.PromptOptimizer`)."""

    settings: OptimizerSettings
    plan: Plan
    judge: Judge
    judge_model: str
    rubric: str
    task: str | None
    relative: bool


TIE = 1e-9

logger = logging.getLogger(__name__)
_PRINTING = threading.Lock()
"""DSPy's bootstrap prints to stdout, where `autorl benchmark` prints its table: one optimization at a time
runs with stdout captured (swapping `sys.stdout` from two threads at once would leave it swapped)."""

Rollout = Callable[[str, list[dict[str, Any]], str], Awaitable[Trajectory]]
"""One answer through the agent loop: (system prompt, earlier turns, input) -> the trajectory."""


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


class OptimizationSession:
    """One optimization: DSPy runs on a worker thread; answers and judge calls run on the event loop.

    Identical requests (same prompt, earlier turns and input) are answered once, as DSPy's LM cache would;
    judge scores are kept per answer."""

    def __init__(
        self,
        owner: SessionOwner,
        system_prompt: str,
        rollout: Rollout,
        tools: list[dict] | None,
        loop: asyncio.AbstractEventLoop,
        process_calls: Counter,
        answered_as: tuple[str, str],
    ):
        self.owner, self.system_prompt, self.rollout, self.tools = owner, system_prompt, rollout, tools
        self.loop, self.process_calls, self.answered_as = loop, process_calls, answered_as
        self.calls: Counter = Counter()
        self.tokens: Counter = Counter()
        """(kind, model, "prompt" | "completion") -> tokens of this optimization's answers (`answered_as`: the
        variant's kind and model), judge requests and reflection calls, for `pipelines.records.pricing.priced`."""
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

    def _add_tokens(self, kind: str, model: str, prompt: float, completion: float) -> None:
        with self._lock:
            self.tokens[kind, model, "prompt"] += round(prompt)
            self.tokens[kind, model, "completion"] += round(completion)

    def converse(self, system_prompt: str, earlier: list[dict[str, Any]], text: str, tag: str = "") -> list[dict]:
        key = canonical_json([system_prompt, earlier, text, tag])
        with self._lock:
            if key in self._answers:
                return self._answers[key]
        trajectory = self._run(self.rollout(system_prompt, earlier, text))
        self._count("policy")
        metrics = trajectory.metrics
        self._add_tokens(*self.answered_as, metrics.get("prompt_tokens", 0), metrics.get("completion_tokens", 0))
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
        shares = [t.metrics for t in scored.trajectories]  # RULER splits a request's tokens over the group
        self._add_tokens(
            "judge",
            owner.judge_model,
            sum(m.get("ruler_prompt_tokens", 0) for m in shares),
            sum(m.get("ruler_completion_tokens", 0) for m in shares),
        )
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
        from dspy.teleprompt.gepa.instruction_proposal import InstructionProposer  # dspy's GEPA, when it runs

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
            for call in reflection.history:
                usage = call.get("usage") or {}
                self._add_tokens(
                    "reflection",
                    counted_as(ModelEndpoint.parse(settings.reflection_model)),
                    usage.get("prompt_tokens") or 0,
                    usage.get("completion_tokens") or 0,
                )
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
