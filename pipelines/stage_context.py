"""What every stage gets (`StageContext`): the task, the run config, the artifact store, the policy
(`pipelines.policy`), the judge, the trackers and counters; the groups it has answered and judged
(`gather_judged`, `score`). It is a `pipelines.records.run.RunArtifacts`: the stages' readers of artifacts read
through it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from autorl import gather_trajectory_groups, tracing
from autorl.progress import gather_counted
from autorl.task import TaskSpec
from autorl.tracking import Tracker
from autorl.trajectories import TrajectoryGroup
from ruler import DEFAULT_RUBRIC, Judge, ruler_score_group
from ruler.calls import CallRecord
from ruler.endpoint import EMBEDDED

from .artifacts import ArtifactStore
from .config import RunConfig
from .policy import Policy

Judging = Callable[[TrajectoryGroup], Awaitable[TrajectoryGroup | None]]
"""What judges a group for `StageContext.gather_judged`: the judged group, or None to drop it."""
MAX_FAILED_ROLLOUTS = 0.25
"""Share of a batch's rollouts that may fail (each dropped from its group) before the stage fails."""


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
        results = await gather_counted((judge(g) for g in answered), f"{desc}: judging", "group")
        return [g for g in results if g is not None]

    async def score(self, group: TrajectoryGroup) -> TrajectoryGroup | None:
        """The group scored by the run's judge, told the task; None (logged) when the judge cannot score it."""
        with tracing.span("autorl.judge", {"autorl.judge": self.config.judge, "autorl.answers": len(group)}) as span:
            scored = await ruler_score_group(
                group, self.judge, self.rubric, swallow_exceptions=True, task=self.task.description
            )
            if span is not None and scored is not None:
                tracing.set_attributes(span, judge_attributes(scored))
                tracing.rewards(scored.trajectories, span)  # each under its rollout's span
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
    scores = [float(t.reward) for t in scored.trajectories]
    tokens = {  # a judge that asked no model (a program judge, a cached judging) has no token counts
        "gen_ai.usage.input_tokens": round(sum(m.get("ruler_prompt_tokens", 0) for m in metrics)),
        "gen_ai.usage.output_tokens": round(sum(m.get("ruler_completion_tokens", 0) for m in metrics)),
    }
    return {
        "autorl.judge.scores": scores,
        "autorl.judge.requests": attempts,
        "autorl.judge.retries": max(attempts - 1, 0),
        **(tokens if attempts else {}),
        "autorl.judge.explanations": " | ".join(t.logs[-1] if t.logs else "" for t in scored.trajectories)[:2000],
        **tracing.io(output="scores: " + ", ".join(f"{score:g}" for score in scores)),
    }
