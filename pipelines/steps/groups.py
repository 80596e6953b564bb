"""A training step's judged groups: answered by the policy, judged, saved as they come (`judged_groups`), and
drawn until enough of them differ in score (`sampled_groups`, dynamic sampling: `pipelines.sampling`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from autorl.atomic import atomic_text
from autorl.task import TaskSpec
from autorl.training.loss import tied
from autorl.trajectories import TrajectoryGroup
from ruler.api import group_tools
from ruler.audit import audit_judge
from ruler.judges import judge_name

from ..artifacts import canonical_json
from ..config import RunConfig
from ..records.step_costs import GROUP_COST
from ..sampling import SAMPLING_FILE, InputQueue, step_record
from ..stage_context import StageContext


async def sampled_groups(
    ctx: StageContext,
    prompt: str,
    queue: InputQueue,
    rl_step: int,
    step_dir: Path,
    desc: str,
    tie_spread: float,
    extend: bool,
) -> tuple[list[TrajectoryGroup], list[str]]:
    """RL step `rl_step`'s judged groups (`judged_groups`, saved in `step_dir`) and the inputs it drew: the next
    `groups_per_step` of `queue`, then, while fewer than that many groups differ in score by more than
    `tie_spread` (the update's: the judge's noise or `--tie-spread`, the larger), more inputs up to
    `dynamic_sampling` x `groups_per_step` groups (where the judge can be trusted with it: `judge_noise`).
    Writes the step's `SAMPLING_FILE` and prints what the sampling drew beyond the first."""
    config = ctx.config
    most = config.groups_per_step * (config.dynamic_sampling if extend else 1)
    groups: list[TrajectoryGroup] = []
    drawn: list[str] = []
    wanted = config.groups_per_step
    while wanted > 0 and (texts := queue.draw(wanted, rl_step, set(drawn))):
        saved = [step_dir / f"group_{len(drawn) + index:02d}.json" for index in range(len(texts))]
        drawn += texts
        groups += await judged_groups(ctx, prompt, texts, saved, desc)
        differing = sum(not tied([t.reward for t in g.trajectories], tie_spread) for g in groups)
        wanted = min(config.groups_per_step - differing, most - len(drawn))
    tied_inputs = {
        g.trajectories[0].metadata.get("input") for g in groups if tied([t.reward for t in g.trajectories], tie_spread)
    }
    aside = queue.record(rl_step, drawn, tied_inputs)
    record = step_record(queue, drawn, tied_inputs, len(drawn) * config.group_size, aside)
    atomic_text(step_dir / SAMPLING_FILE, canonical_json(record))
    said = [f"{len(tied_inputs)} of {len(drawn)} groups tied"]
    if len(drawn) > config.groups_per_step:
        said.append(f"so it drew {len(drawn) - config.groups_per_step} more inputs (dynamic sampling)")
    if aside:
        said.append(f"{len(aside)} inputs set aside after tying twice")
    if len(said) > 1:
        ctx.console.print(f"{desc}: {', '.join(said[:2])}{'; ' + said[2] if len(said) > 2 else ''}", highlight=False)
    return groups, drawn


async def judged_groups(
    ctx: StageContext, prompt: str, texts: list[str], saved: list[Path | None], desc: str, name: str | None = None
) -> list[TrajectoryGroup]:
    """`group_size` answers to each of `texts` by the policy (its newest checkpoint, or the model served as
    `name`; under `--tool-choice required` the first `RunConfig.forced_answers` of them forced to call), each
    group judged (`StageContext.gather_judged`: as soon as its answers are in, or after all
    of them); the groups the judge scored, in order.

    A group with a path in `saved` is written there (atomically) once scored, with what it took in its
    metadata (`GROUP_COST`), and read from there instead of answered again when the file exists: scored
    before a crash, or by the preflight stage.
    """
    config = ctx.config
    size, forced, unaided = config.group_size, config.forced_answers(), config.unaided()
    groups = []
    for text, path in zip(texts, saved, strict=True):
        if path is not None and path.exists():  # scored before: reuse
            groups.append(TrajectoryGroup.model_validate_json(path.read_text()))
        else:
            answers = (ctx.policy.answer(prompt, text, config if i < forced else unaided, name) for i in range(size))
            groups.append(TrajectoryGroup(answers, metadata={"save": str(path) if path else ""}))
    started = time.monotonic()

    async def score_and_save(group: TrajectoryGroup) -> TrajectoryGroup | None:
        if "save" not in group.metadata:
            return group
        scored = await ctx.score(group)
        if scored is not None:  # its cost goes with it, also where the preflight stage saves it later
            attempts = int(scored.trajectories[0].metrics.get("ruler_attempts", 0)) if scored.trajectories else 0
            scored.metadata[GROUP_COST] = {
                "seconds": round(time.monotonic() - started, 2),  # its answers and its judging, from the start
                "model_calls": {"policy": config.group_size, "judge": attempts},
            }
            if path := scored.metadata.pop("save"):
                atomic_text(Path(path), scored.model_dump_json())
        return scored

    await ctx.policy.start()
    return await ctx.gather_judged(groups, desc, score_and_save)


def group_settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    """What a step's judged groups depend on: the policy's sampling and the judge (the preflight stage makes
    step 1's groups by them too)."""
    return {
        "model": config.model,
        **config.judging(),
        "task": task.description,  # the judge is told the task
        "rubric": task.rubric,
        "group_size": config.group_size,
        "groups_per_step": config.groups_per_step,
        "rollout": config.rollout.model_dump(),
        "server": config.server.model_dump(exclude=SERVER_PLACEMENT),
        **task.agent_settings(),  # the rollouts' tools and turns
    }


SERVER_PLACEMENT = {"host", "port", "startup_timeout_s", "max_restarts", "enforce_eager"}
"""Server settings that say where, how patiently, how persistently and how quickly started the server runs,
not what it computes."""


async def judge_audit(
    ctx: StageContext, groups: list[TrajectoryGroup], earlier: tuple[str, dict[str, Any] | None] = ("", None)
) -> dict[str, Any]:
    """The judge audit (`ruler.audit_judge`) of `groups` as a run records it: its figures, `line` and `judge`,
    its requests counted in the stage's calls. `earlier` (where, and the record) is an audit an upstream stage of
    this run made: a judge it found to be noise is not asked again (minutes of re-judging, and nothing chosen by
    its scores either way), and its record comes back with `reused` naming where it was made."""
    where, record = earlier
    if record and record.get("verdict") == "noise":
        line = record["line"] if record.get("reused") else f"{record['line']} (the {where}'s audit; not asked again)"
        return {**record, "line": line, "reused": record.get("reused") or where}
    result = await audit_judge(
        ctx.judge,
        [[t.messages() for t in g.trajectories] for g in groups],
        rubric=ctx.rubric,
        tools=group_tools(groups[0]) if groups else None,
        task=ctx.task.description,
        scores=[[t.reward for t in g.trajectories] for g in groups],
    )
    ctx.calls["judge"] += result.attempts
    ctx.judging["groups"] += 2 * result.groups + result.failed
    ctx.judging["failed"] += result.failed
    return {**result.as_dict(), "line": result.line(), "judge": judge_name(ctx.judge)}


def unreliable(audit: dict[str, Any] | None) -> str | None:
    """Why a judge with this audit cannot choose among answers (its verdict is not reliable); None when it can,
    or when there is no audit (a program judge is not audited where it chooses)."""
    if audit is None or audit["verdict"] == "reliable":
        return None
    return f"the judge is not reliable on these answers ({audit['verdict']})"
