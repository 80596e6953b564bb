"""The answers of agent variants (`pipelines.benchmarking.variants`) to the held-out inputs of `autorl benchmark`.

Base and checkpoints of a run are served by that run's policy server (one local vLLM server, serving
one checkpoint after the other: merged into the weights under merged serving, the CPU default, or as a
LoRA requested by its own name under adapter serving); runs are served one after another, never two
servers at once. API models answer through their endpoint meanwhile.
Answers are cached in the artifact store, one artifact `benchmark_answers/<key>/` per variant and
input, keyed by what they depend on: the model (for a checkpoint, the hash of its LoRA weights), the
system prompt and any earlier turns, the input, the number of samples and the sampling settings.
A `+optimized` variant's prompt is tuned (`pipelines.benchmarking.optimize`, cached too) right before it
answers, on the server that serves its model.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autorl import gather_trajectory_groups
from autorl.agents.rollout import Complete, RolloutConfig, Turn, openai_completion
from autorl.model import Model
from autorl.task import TaskSpec
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.artifacts import ArtifactStore, code_version, stage_key
from pipelines.policy import Policy, task_rollout
from pipelines.records.pricing import Meter, counted_as
from ruler.endpoint import LiteLLMTarget, import_litellm
from ruler.retry import describe

from .variants import RunView, Variant

if TYPE_CHECKING:  # answers' cache keys depend on the prompt they are made with, not on the optimizer's code
    from .dspy_session import Rollout
    from .optimize import PromptOptimizer

STAGE = "benchmark_answers"
FILE = "answers.jsonl"


@dataclass
class Questions:
    """What every variant answers and how: the inputs, answers per input, sampling settings, the artifact store
    that caches answers, the model-call counter, the benchmarked run's policy, whose task's tools (opened
    on first use) every variant answers with, and the optimizer of `+optimized` variants' prompts."""

    texts: list[str]
    samples: int
    rollout: RolloutConfig
    store: ArtifactStore
    calls: Counter
    tools: Policy
    optimizer: PromptOptimizer | None = None
    embedded_judge: bool = False
    """The judge is the embedded model: its server starts with the first policy server that answers (new
    answers are judged), at the same time instead of after the answers."""
    meter: Meter = field(default_factory=Meter)
    """The tokens of every answer made in this process (`answered_as`), for what the benchmark spent."""


def answered_as(variant: Variant) -> tuple[str, str]:
    """How a variant's answer tokens are priced (`pipelines.costs`: kind, model): a run's checkpoint answers on
    this machine (`policy`, priced by time), an API model at its tokens' price (`answers`)."""
    if variant.run is not None:
        return "policy", variant.run.name
    return "answers", counted_as(variant.api)


@dataclass
class Answers:
    """A variant's answers: `samples` trajectories per input it answered, and why any failed."""

    by_input: dict[str, list[Trajectory]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def answer_key(variant: Variant, text: str, samples: int, rollout: RolloutConfig, task: TaskSpec) -> str:
    config = {
        "variant": variant.identity,
        "system_prompt": variant.system_prompt,
        "demos": variant.demos,
        "input": text,
        "samples": samples,
        "rollout": rollout.model_dump(),
        **task.agent_settings(),
    }
    return stage_key(STAGE, config, code_version(sys.modules[__name__]), {})


async def answer_all(variants: list[Variant], questions: Questions) -> dict[str, Answers]:
    """Every variant's `samples` answers to every input, from the cache where it has them.

    API variants answer concurrently with the local ones; the local variants of one run answer one
    after the other on its server (merged LoRA serving holds one checkpoint at a time), and one run's
    server is stopped before the next run's starts (the last stays up, so an embedded judge can reuse
    it if it serves adapters). A variant whose model cannot be reached gets no
    answers and its errors instead; the others are not held up.
    """
    results: dict[str, Answers] = {}

    async def local() -> None:
        by_run: dict[str, list[Variant]] = {}
        for variant in variants:
            if variant.run is not None:
                by_run.setdefault(variant.run.name, []).append(variant)
        previous: RunView | None = None
        for group in by_run.values():
            run = group[0].run
            if previous is not None:
                await previous.policy.aclose()
            work = [_VariantWork(v, questions) for v in group]
            if any(w.missing for w in work):
                try:
                    await run.policy.start(with_embedded=questions.embedded_judge)
                except Exception as exc:  # the server did not start: all of this run's variants fail
                    for w in work:
                        w.fail_missing(describe(exc))
            for w in work:
                results[w.variant.label] = await w.run()
            previous = run

    async def remote() -> None:
        work = [_VariantWork(v, questions) for v in variants if v.api is not None]
        for w, answers in zip(work, await asyncio.gather(*(w.run() for w in work)), strict=True):
            results[w.variant.label] = answers

    await asyncio.gather(local(), remote())
    return {v.label: results[v.label] for v in variants}


class _VariantWork:
    """Answers of one variant: cached ones loaded, missing ones asked for and cached as each input finishes;
    for a `+optimized` variant whose prompt is not cached yet, every input is missing until it is tuned."""

    def __init__(self, variant: Variant, questions: Questions):
        self.variant, self.questions = variant, questions
        self.answers = Answers()
        self.keys: dict[str, str] = {}
        self.tune = variant.optimize and not questions.optimizer.apply_cached(variant)
        if self.tune:
            self.missing = list(questions.texts)
        else:
            self._load()

    def _load(self) -> None:
        """The answer keys of the variant's prompt; cached answers loaded, the other inputs missing."""
        store, q = self.questions.store, self.questions
        self.keys = {text: answer_key(self.variant, text, q.samples, q.rollout, q.tools.task) for text in q.texts}
        self.missing = []
        for text, key in self.keys.items():
            if store.exists(STAGE, key):
                lines = (store.path(STAGE, key) / FILE).read_text().splitlines()
                self.answers.by_input[text] = [Trajectory.model_validate_json(line) for line in lines]
            else:
                self.missing.append(text)

    def fail_missing(self, error: str) -> None:
        self.answers.errors += [error] * (len(self.missing) * self.questions.samples)
        self.missing = []

    async def run(self) -> Answers:
        if self.missing:
            try:
                rollout, close = await self._responder()
            except Exception as exc:
                self.fail_missing(describe(exc))
            else:
                try:
                    if self.tune:
                        await self._tune(rollout)
                    await self._ask(lambda text: self._answer_alone(rollout, text))
                except Exception as exc:  # the optimizer failed (its judge, say): this variant fails alone
                    self.fail_missing(describe(exc))
                finally:
                    await close()
        for trajectories in self.answers.by_input.values():
            for trajectory in trajectories:
                trajectory.metadata["variant"] = self.variant.label
        return self.answers

    async def _answer_alone(self, rollout: Rollout, text: str) -> Trajectory:
        """The variant's answer to `text` as the judge reads it: the system prompt, the input and the answer,
        without the demonstrations shown before the input (a judge that reads the first question, or every
        tool call, would score a demonstration's)."""
        demos = self.variant.demos
        trajectory = await rollout(self.variant.system_prompt, demos, text)
        if demos:
            items = trajectory.messages_and_choices
            trajectory.messages_and_choices = [items[0], *items[1 + len(demos) :]]
        return trajectory

    async def _tune(self, rollout: Rollout) -> None:
        toolbox = await self.questions.tools.toolbox()
        tools = toolbox.openai_tools() if toolbox is not None else None
        q = self.questions
        tokens = await q.optimizer.optimize(self.variant, rollout, tools, q.calls, answered_as(self.variant))
        for (kind, model, side), count in tokens.items():  # its answers and judge calls are counted as they happen
            if kind == "reflection":
                q.meter.tokens[kind, model, side] += count
        self.tune = False
        self._load()

    async def _ask(self, respond: Callable[[str], Awaitable[Trajectory]]) -> None:
        def keep(group: TrajectoryGroup) -> TrajectoryGroup:
            text = group.metadata["input"]
            if group.trajectories:
                self.answers.by_input[text] = group.trajectories
            if group.exceptions:
                self.answers.errors += [describe(e) for e in group.raised] or group.exceptions
            else:  # only complete answer sets are cached; a failed request is asked again next time
                with self.questions.store.write(STAGE, self.keys[text], {"variant": self.variant.identity}) as out:
                    (out / FILE).write_text("".join(t.model_dump_json() + "\n" for t in group.trajectories))
            return group

        groups = [
            TrajectoryGroup((respond(text) for _ in range(self.questions.samples)), metadata={"input": text})
            for text in self.missing
        ]
        await gather_trajectory_groups(
            groups, pbar_desc=f"answers {self.variant.label}", max_exceptions=math.inf, after_each=keep
        )

    async def _responder(self) -> tuple[Rollout, Callable[[], Awaitable[None]]]:
        """A function answering one input with a given system prompt and earlier turns, and one releasing
        what it holds."""
        v, q, rollout = self.variant, self.questions, self.questions.rollout

        async def nothing() -> None:
            return None

        if v.run is not None:
            name = await v.run.policy.serve_step(v.step)
            config = v.run.config.model_copy(update={"rollout": rollout})

            async def ask(system_prompt: str, demos: list[dict], text: str) -> Trajectory:
                return await v.run.policy.answer(system_prompt, text, config, name, demos)

            close = nothing
        else:
            target = v.api.target()
            if target.api_base:  # an OpenAI-compatible server: the client the policy is asked with
                endpoint = Model(name=target.name, inference_base_url=target.api_base, inference_api_key=target.api_key)
                client = endpoint.openai_client()
                complete, close = openai_completion(client, target.name, rollout), client.close
            else:
                complete, close = litellm_completion(target, rollout), nothing

            async def ask(system_prompt: str, demos: list[dict], text: str) -> Trajectory:
                q.calls["policy"] += 1
                return await task_rollout(complete, system_prompt, text, q.tools.task, await q.tools.toolbox(), demos)

        kind, model = answered_as(v)

        async def respond(system_prompt: str, demos: list[dict], text: str) -> Trajectory:
            trajectory = await ask(system_prompt, demos, text)
            metrics = trajectory.metrics
            q.meter.add(kind, model, metrics.get("prompt_tokens", 0), metrics.get("completion_tokens", 0))
            return trajectory

        return respond, close


def litellm_completion(target: LiteLLMTarget, rollout: RolloutConfig) -> Complete:
    """Completions of a provider-routed LiteLLM model (the key comes from the provider's usual environment
    variable, or the model's `api_key_env`); its turns join the conversation as plain assistant messages
    (an API model is not trained)."""

    async def complete(messages: list[dict], tools: list[dict] | None) -> Turn:
        response = await import_litellm().acompletion(
            **target.params(),
            messages=messages,
            max_tokens=rollout.max_tokens,
            temperature=rollout.temperature,
            drop_params=True,  # providers that reject a sampling setting get the request without it
            num_retries=2,
            **({"tools": tools} if tools else {}),
        )
        choice = response.choices[0]
        message: dict = {"role": "assistant", "content": choice.message.content or ""}
        if getattr(choice.message, "tool_calls", None):
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in choice.message.tool_calls
            ]
        usage = getattr(response, "usage", None)
        tokens = [getattr(usage, side, 0) or 0 for side in ("completion_tokens", "prompt_tokens")]
        return Turn(message, choice.finish_reason, *tokens)

    return complete
