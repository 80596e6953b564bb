"""What every stage gets (`StageContext`): the task, the run config, the artifact store, the policy server,
counters (it is a `pipelines.records.run.RunArtifacts`: the stages' readers of artifacts read through it)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from autorl import TrainableModel, gather_trajectory_groups, tracing
from autorl.activity import activity
from autorl.agents.rollout import Complete, agent_rollout, openai_completion
from autorl.agents.tools import Toolbox
from autorl.backends import make_backend
from autorl.backends.run_dir import ensure_writable
from autorl.progress import progress_bar
from autorl.serving.embedded import embedded_endpoint, resolve_base_model, stop_shared_servers
from autorl.serving.scoring import prompt_logprobs
from autorl.task import TaskSpec
from autorl.threads import in_daemon_thread
from autorl.tracking import Tracker
from autorl.training.sequences import Sequence, tokenize_trajectory
from autorl.trajectories import Trajectory, TrajectoryGroup
from ruler import DEFAULT_RUBRIC, Judge, ruler_score_group
from ruler.calls import CallRecord
from ruler.endpoint import EMBEDDED

from .artifacts import ArtifactStore
from .config import RunConfig
from .records.pricing import Meter

TRAIN_PROJECT = "train"


Judging = Callable[[TrajectoryGroup], Awaitable[TrajectoryGroup | None]]
"""What judges a group for `StageContext.gather_judged`: the judged group, or None to drop it."""
MAX_FAILED_ROLLOUTS = 0.25
"""Share of a batch's rollouts that may fail (each dropped from its group) before the stage fails."""


class Policy:
    """The policy model on a local vLLM server (or replicas on a Ray cluster, or an `autorl serve` elsewhere:
    `RunConfig.cluster`), and the task's tools; each started on first use (a fully cached run starts neither;
    on a cluster it still joins Ray, so that an unreachable address fails before any stage runs)."""

    def __init__(
        self, config: RunConfig, artifacts: Path, train_key: str, calls: Counter, task: TaskSpec, log_dir: Path
    ):
        self.backend = make_backend(artifacts, config.server, config.cluster, config.backend)
        self.model = TrainableModel(  # W&B: the run's own Tracker logs its steps (report_metrics=[]: not twice)
            name=train_key, project=TRAIN_PROJECT, base_model=config.model, trainer=config.trainer, report_metrics=[]
        )
        self.task = task
        self._log_dir = log_dir
        self._calls = calls
        self.meter = Meter()
        """The tokens of the policy's rollouts in this process (`pipelines.records.pricing`)."""
        self._client = None
        self._toolbox: Toolbox | None = None
        self._tokenizer = None
        self._lock = asyncio.Lock()

    @property
    def run_dir(self) -> Path:
        """Where training writes checkpoints and history (the train stage's artifact directory)."""
        return self.backend.run_dir(self.model)

    async def start(self, with_embedded: bool = False) -> None:
        """Start the policy's server (once). with_embedded: the embedded judge or generator will ask for the
        embedded model's plain weights too; where the policy's server cannot serve them (merged serving on this
        machine: its weights change with training), the embedded model's shared server starts at the same time,
        so the two starts overlap instead of running one after the other. The embedded one starts on a daemon
        thread: when the policy's start fails (an unknown model, a port in use), the error comes at once, nothing
        waits for the other start, and that start is stopped."""
        async with self._lock:
            if self._client is None:
                embedded = None
                if with_embedded and self.starts_apart_from_embedded():
                    self.check_can_start()  # what would fail the policy's start fails before either starts
                    embedded = in_daemon_thread(embedded_endpoint, stay=True)  # the server dies with its thread
                try:
                    await self.model.register(self.backend)
                except BaseException:
                    if embedded is not None and not embedded.done():
                        stop_shared_servers()  # the run ends here: the start made for it does not go on
                    raise
                if embedded is not None:
                    await embedded
                self._client = self.model.openai_client()

    def check_can_start(self) -> None:
        """Raise the error line the policy server's start would end in at once: a run directory that cannot be
        written; on this machine, an unknown model or a port in use; an `autorl serve` that does not answer or
        refuses the token."""
        ensure_writable(self.run_dir)
        self.backend.check_can_start(self.model)

    def starts_apart_from_embedded(self) -> bool:
        """Whether the embedded model's plain weights need a server of their own beside the policy's: with the
        policy on an `autorl serve`, or on this machine with merged serving (adapter serving keeps the base
        weights servable, and the embedded endpoint reuses the policy's server; a cluster has replicas of its
        own for them)."""
        return self.backend.starts_embedded_apart()

    def beside_embedded_on_cpu(self) -> bool:
        """Whether the policy's server and the embedded model's are two vLLM engines on this machine's CPU
        (merged serving without CUDA), which slow each other down when both decode at once."""
        return self.backend.shares_cpu_with_embedded()

    async def toolbox(self) -> Toolbox | None:
        """The task's tools, opened on first use (its MCP servers start then, once per run); None when the
        task has no tools."""
        if not self.task.has_tools():
            return None
        async with self._lock:
            if self._toolbox is None:
                self._toolbox = await Toolbox.open(self.task, log_dir=self._log_dir)
        return self._toolbox

    async def answer(
        self,
        system_prompt: str,
        text: str,
        config: RunConfig,
        name: str | None = None,
        demos: list[dict] | None = None,
    ) -> Trajectory:
        """One rollout of the policy (the newest LoRA, or the model served as `name`) with the task's tools,
        after the earlier turns `demos` if any."""
        await self.start()
        self._calls["policy"] += 1
        served = name or self.model.get_inference_name()
        complete = openai_completion(self._client, served, config.rollout)
        with (
            tracing.span("autorl.rollout", {"gen_ai.request.model": served, "autorl.input": text[:500]}) as span,
            activity("policy"),
        ):
            trajectory = await task_rollout(complete, system_prompt, text, self.task, await self.toolbox(), demos)
            tracing.set_attributes(span, {f"autorl.{k}": v for k, v in trajectory.metrics.items()})
        if span is not None:  # the trajectory links to its trace
            trajectory.metadata.update(tracing.ids(span))
        metrics = trajectory.metrics
        self.meter.add("policy", config.model, metrics.get("prompt_tokens", 0), metrics.get("completion_tokens", 0))
        return trajectory

    async def base_logprobs(self, trajectories: list[Trajectory]) -> list[tuple[Sequence, list[float | None] | None]]:
        """Each trajectory as the trainer tokenizes it, and each of its tokens' logprob under the base model
        (None for a trajectory the server could not score), scored by the policy's server serving step 0
        (with merged serving the base weights are swapped back in)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer  # transformers: loaded when drift is measured only

            directory = resolve_base_model(self.model.base_model)
            self._tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, directory)
        sequences = [tokenize_trajectory(t, self._tokenizer) for t in trajectories]
        base = await self.serve_step(0)
        if self.serves_adapters():  # one at a time: see `serves_adapters`
            scored = [await prompt_logprobs(self._client, base, s.input_ids) for s in sequences]
        else:
            scored = await asyncio.gather(*(prompt_logprobs(self._client, base, s.input_ids) for s in sequences))
        return list(zip(sequences, scored, strict=True))

    def serves_adapters(self) -> bool:
        """Whether the policy's server has vLLM's LoRA support on (adapter serving; an `autorl serve` is asked
        for it). vLLM 0.32 on CPU with it on crashes its engine on prompt_logprobs requests batched together
        ("einsum(): subscript b has size 7 ... does not broadcast"; one request at a time is answered), which
        `base_logprobs` therefore sends one after the other."""
        return self.backend.serves_adapters()

    async def serve_step(self, step: int) -> str:
        """The served name of checkpoint `step` (the base model for 0), loading it if needed."""
        await self.start()
        return await self.backend.serve_checkpoint(self.model, step)

    async def aclose(self) -> None:
        """Stop the task's MCP servers and the policy's vLLM server."""
        try:
            if self._toolbox is not None:
                await self._toolbox.aclose()
        finally:
            self.backend.close()


async def task_rollout(
    complete: Complete,
    system_prompt: str,
    text: str,
    task: TaskSpec,
    toolbox: Toolbox | None,
    demos: list[dict] | None = None,
) -> Trajectory:
    """One answer to the input `text` by the model behind `complete`, with the task's tools and turns, after
    the earlier turns `demos` (demonstrations) if any."""
    turns = task.max_turns if toolbox is not None else 1
    return await agent_rollout(
        complete, system_prompt, text, toolbox=toolbox, max_turns=turns, metadata={"input": text}, demos=demos
    )


@dataclass
class StageContext:
    """What a stage's `run` and `is_done` get (`pipelines.stages.Stage`)."""

    task: TaskSpec
    config: RunConfig
    store: ArtifactStore
    keys: dict[str, str]
    policy: Policy
    judge: Judge
    tracker: Tracker
    run_dir: Path
    console: Console
    calls: Counter = field(default_factory=Counter)
    """Model calls made by this process, by kind (policy, judge, generator)."""
    judging: Counter = field(default_factory=Counter)
    """What the judge did in this process: `groups` it was given, `failed` (not scored), `retries` (requests
    beyond the first for the groups it scored), `shortened` (answers cut to fit the judge's context). The
    pipeline records each stage's share in its summary."""
    generator_calls: list[CallRecord] = field(default_factory=list)
    """The generator's requests made in this process, in order (the inputs and system prompt stages add
    theirs); the pipeline records each stage's in run.json, beside the judge's (`judge_calls`)."""

    def judge_calls(self) -> list[CallRecord]:
        """The judge's requests made in this process, in order (a RULER judge keeps them; a program judge
        makes none)."""
        return list(getattr(self.judge, "calls", []))

    def artifact(self, stage: str) -> Path:
        """The directory of a stage's artifact."""
        return self.store.path(stage, self.keys[stage])

    def has_artifact(self, stage: str) -> bool:
        """Whether a stage's artifact is complete in the store."""
        return self.store.exists(stage, self.keys[stage])

    @property
    def rubric(self) -> str:
        return self.task.rubric or DEFAULT_RUBRIC

    @property
    def judge_after_rollouts(self) -> bool:
        """Whether `gather_judged` judges a batch's groups once all its answers are in rather than each group
        as soon as its own are: where the embedded judge's engine and the policy's share this machine's CPU
        (`Policy.beside_embedded_on_cpu`), judging while the policy still answers gains nothing on busy cores
        and slows both engines (`python benchmarks/perf/perf_first_run.py`)."""
        return self.config.judge == EMBEDDED and self.policy.beside_embedded_on_cpu()

    async def gather_judged(
        self, groups: list[TrajectoryGroup], desc: str, judge: Judging | None = None
    ) -> list[TrajectoryGroup]:
        """The groups' rollouts, each group then judged by `judge` (default `score`): as soon as its answers
        are in, or, where `judge_after_rollouts`, all at once after the last answer (the judge's engine batches
        them), with a bar of its own. Up to `MAX_FAILED_ROLLOUTS` of the rollouts may fail; the groups the
        judge scored, in order."""
        judge = judge or self.score
        if not self.judge_after_rollouts:
            return await gather_trajectory_groups(
                groups, pbar_desc=desc, max_exceptions=MAX_FAILED_ROLLOUTS, after_each=judge
            )
        answered = await gather_trajectory_groups(groups, pbar_desc=desc, max_exceptions=MAX_FAILED_ROLLOUTS)
        bar = progress_bar(f"{desc}: judging", len(answered), "group")

        async def judged(group: TrajectoryGroup) -> TrajectoryGroup | None:
            result = await judge(group)
            bar.update(1)
            return result

        try:
            results = await asyncio.gather(*(judged(g) for g in answered))
        finally:
            bar.close()
        return [g for g in results if g is not None]

    async def score(self, group: TrajectoryGroup) -> TrajectoryGroup | None:
        """The group scored by the run's judge, told the task; None (logged) when the judge cannot score it."""
        with tracing.span("autorl.judge", {"autorl.judge": self.config.judge, "autorl.answers": len(group)}) as span:
            scored = await ruler_score_group(
                group, self.judge, self.rubric, swallow_exceptions=True, task=self.task.description
            )
            if span is not None and scored is not None:
                tracing.set_attributes(span, judge_attributes(scored))
                for trajectory in scored.trajectories:  # each answer links to the judging that scored it
                    trajectory.metadata["judge_span_id"] = tracing.ids(span)["span_id"]
        self.judging["groups"] += 1
        if scored is None:
            self.judging["failed"] += 1
        elif scored.trajectories:  # RULER's metrics: requests made (0 when cached), answers shortened to fit
            metrics = [t.metrics for t in scored.trajectories]
            attempts = int(metrics[0].get("ruler_attempts", 0))
            self.calls["judge"] += attempts
            self.judging["retries"] += max(attempts - 1, 0)
            self.judging["shortened"] += int(sum(m.get("ruler_shortened", 0) for m in metrics))
        return scored


def judge_attributes(scored: TrajectoryGroup) -> dict:
    """A judging's span attributes: the parsed scores, the requests it took, its tokens (RULER's metrics)."""
    metrics = [t.metrics for t in scored.trajectories]
    attempts = int(metrics[0].get("ruler_attempts", 0)) if metrics else 0
    return {
        "autorl.judge.scores": [float(t.reward) for t in scored.trajectories],
        "autorl.judge.requests": attempts,
        "autorl.judge.retries": max(attempts - 1, 0),
        "gen_ai.usage.input_tokens": round(sum(m.get("ruler_prompt_tokens", 0) for m in metrics)),
        "gen_ai.usage.output_tokens": round(sum(m.get("ruler_completion_tokens", 0) for m in metrics)),
        "autorl.judge.explanations": " | ".join(t.logs[-1] if t.logs else "" for t in scored.trajectories)[:2000],
    }
