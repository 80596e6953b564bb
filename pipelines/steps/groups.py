"""A training step's judged groups: answered by the policy, judged, saved as they come (`judged_groups`), and
drawn until enough of them differ in score (`sampled_groups`, dynamic sampling: `pipelines.sampling`)."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from autorl.atomic import atomic_text
from autorl.task import TaskSpec
from autorl.training.loss import TIE_TOLERANCE, tied
from autorl.trajectories import TrajectoryGroup
from ruler.api import group_tools
from ruler.audit import audit_judge
from ruler.judges import judge_name
from ruler.scores import TURN_REWARDS

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
    """RL step `rl_step`'s judged groups (`judged_groups`, saved in `step_dir`) and the inputs it drew.

    It draws the next `groups_per_step` inputs of `queue`. Then, while fewer than that many groups differ (`differs`:
    in score by more than `tie_spread`, the update's, which is the judge's noise or `--tie-spread`, the larger; or
    turn by turn) and the step's rollout budget lasts (`dynamic_sampling` x `groups_per_step` x `group_size`
    answers), it spends the budget where a difference is likeliest: a tied group that may still differ
    (`searchable`; tied at a partial score before tied at 0) gets `group_size` more answers, judged together with
    its earlier ones, up to `tie_search` rounds; where too few such groups are left it draws more inputs (DAPO's
    dynamic sampling). Only where the judge can be trusted with it (`extend`: `judge_noise`), as is marking an input
    done. A searched group trains on `group_size` of its answers (`balanced`). Writes the step's `SAMPLING_FILE`
    and prints what the step did beyond its first draw."""
    config = ctx.config
    size, most_rounds = config.group_size, config.tie_search if extend else 0
    by_turn = config.train.turn_advantage_weight > 0  # a group tied in total may differ turn by turn
    budget = size * config.groups_per_step * (config.dynamic_sampling if extend else 1)
    by_input: dict[str, TrajectoryGroup] = {}  # each input's newest judged group
    rounds: dict[str, int] = {}  # search rounds tried per input
    paths: dict[str, Path] = {}
    drawn: list[str] = []
    texts, search = queue.draw(config.groups_per_step, rl_step), []
    while texts or search:
        paths |= {text: step_dir / f"group_{len(drawn) + index:02d}.json" for index, text in enumerate(texts)}
        drawn += texts
        earlier = [None] * len(texts) + [by_input[text] for text in search]
        asked = texts + search
        judged = await judged_groups(ctx, prompt, asked, [paths[t] for t in asked], desc, earlier=earlier)
        for text in search:
            rounds[text] = rounds.get(text, 0) + 1
        for group in judged:
            text = input_of(group)
            by_input[text], rounds[text] = group, max(rounds.get(text, 0), group.metadata.get(SEARCH_ROUNDS, 0))
        differing = sum(differs(g, tie_spread, by_turn) for g in by_input.values())
        wanted = config.groups_per_step - differing
        affordable = (budget - size * (len(drawn) + sum(rounds.values()))) // size
        if wanted <= 0 or affordable <= 0:
            break
        candidates = [
            t for t, g in by_input.items() if searchable(g, tie_spread, by_turn) and rounds.get(t, 0) < most_rounds
        ]
        search = sorted(candidates, key=lambda t: (statistics.fmean(rewards_of(by_input[t])) <= 0, rounds.get(t, 0)))
        search = search[: min(wanted, affordable)]
        more = min(wanted, affordable) - len(search)
        texts = queue.draw(more, rl_step, set(drawn)) if more > 0 else []
    final = [by_input[text] for text in drawn if text in by_input]
    tied_inputs = {input_of(g) for g in final if not differs(g, tie_spread, by_turn)}
    done_inputs = {input_of(g) for g in final if at_top(g)} if extend else set()  # a noise judge's top is noise
    aside = queue.record(rl_step, drawn, tied_inputs, done_inputs)
    searched = {text: count for text, count in rounds.items() if count}
    answers = size * (len(drawn) + sum(searched.values()))
    record = step_record(queue, drawn, tied_inputs, answers, aside, searched, done_inputs)
    atomic_text(step_dir / SAMPLING_FILE, canonical_json(record))
    said = [f"{len(tied_inputs)} of {len(drawn)} groups tied"]
    if searched:
        broke = sum(differs(by_input[t], tie_spread, by_turn) for t in searched)
        said.append(
            f"it searched {len(searched)} tied inputs with {size * sum(searched.values())} more answers, and "
            f"{broke} now differ"
        )
    if len(drawn) > config.groups_per_step:
        said.append(f"it drew {len(drawn) - config.groups_per_step} more inputs (dynamic sampling)")
    if aside:
        said.append(f"{len(aside)} inputs set aside after tying twice")
    if done_inputs:
        said.append(f"{len(done_inputs)} inputs done (every answer at the top score)")
    if len(said) > 1:
        ctx.console.print(f"{desc}: {'; '.join(said)}", highlight=False)
    return [balanced(group, size) for group in final], drawn


SEARCH_ROUNDS = "search_rounds"
"""The metadata key of a saved group's search rounds: how many times `group_size` more answers were added to it."""
TOP_SCORE = 1.0
"""The score no answer can beat (a program judge's full credit, RULER's best): a group whose answers all reach it
has nothing left to learn on its input."""


def rewards_of(group: TrajectoryGroup) -> list[float]:
    return [t.reward for t in group.trajectories]


def input_of(group: TrajectoryGroup) -> str:
    """The training input a group answers (its first answer's `metadata["input"]`)."""
    return group.trajectories[0].metadata.get("input", "") if group.trajectories else ""


def at_top(group: TrajectoryGroup) -> bool:
    """Whether every answer of the group reaches `TOP_SCORE`."""
    return bool(group.trajectories) and min(rewards_of(group)) >= TOP_SCORE - TIE_TOLERANCE


def differs(group: TrajectoryGroup, tie_spread: float, by_turn: bool) -> bool:
    """Whether the group teaches the update something: its answers' rewards differ by more than `tie_spread`, or,
    `by_turn` (credit per turn on: `TrainConfig.turn_advantage_weight`), their turn rewards differ."""
    if not tied(rewards_of(group), tie_spread):
        return True
    return by_turn and len({tuple(t.metadata.get(TURN_REWARDS) or ()) for t in group.trajectories}) > 1


def searchable(group: TrajectoryGroup, tie_spread: float, by_turn: bool) -> bool:
    """Whether more answers to the group's input may break its tie: it ties (`differs`), and not at the top."""
    return not differs(group, tie_spread, by_turn) and not at_top(group)


def balanced(group: TrajectoryGroup, size: int) -> TrajectoryGroup:
    """`group` cut to its first `size` answers when it has more (a searched group), keeping the ones that differ:
    up to half of them from the answers above the group's mean, the rest from those at or below it, each side in
    the order sampled (Reinforce-Ada's balanced down-sampling; a rare success found by the search is kept)."""
    if len(group.trajectories) <= size:
        return group
    mean = statistics.fmean(rewards_of(group))
    above = [t for t in group.trajectories if t.reward > mean + TIE_TOLERANCE]
    rest = [t for t in group.trajectories if t.reward <= mean + TIE_TOLERANCE]
    take_rest = min(len(rest), size - min(len(above), max(1, size // 2)))
    kept = {id(t) for t in above[: size - take_rest] + rest[:take_rest]}
    trajectories = [t for t in group.trajectories if id(t) in kept]
    return group.model_copy(
        update={"trajectories": trajectories, "metadata": {**group.metadata, "sampled": len(group)}}
    )


async def judged_groups(
    ctx: StageContext,
    prompt: str,
    texts: list[str],
    saved: list[Path | None],
    desc: str,
    name: str | None = None,
    earlier: list[TrajectoryGroup | None] | None = None,
) -> list[TrajectoryGroup]:
    """`group_size` answers to each of `texts` by the policy (its newest checkpoint, or the model served as
    `name`; under `--tool-choice required` the first `RunConfig.forced_answers` of them forced to call), each
    group judged (`StageContext.gather_judged`: as soon as its answers are in, or after all
    of them); the groups the judge scored, in order. With a group in `earlier` for a text (a search round), the
    new answers join that group's and the whole group is judged again (a model judge's scores are relative to the
    group it judged: one judging, not two pooled).

    A group with a path in `saved` is written there (atomically) once scored, with what it took in its
    metadata (`GROUP_COST`, the earlier rounds' included), and read from there instead of answered again when the
    file exists (and holds more search rounds than `earlier`'s group): scored before a crash, or by the preflight
    stage.
    """
    config = ctx.config
    size, forced, unaided = config.group_size, config.forced_answers(), config.unaided()
    groups = []
    for text, path, prior in zip(texts, saved, earlier or [None] * len(texts), strict=True):
        done = prior.metadata.get(SEARCH_ROUNDS, 0) if prior is not None else -1
        if path is not None and path.exists() and read_rounds(path) > done:  # scored before: reuse
            groups.append(TrajectoryGroup.model_validate_json(path.read_text()))
            continue
        answers = [ctx.policy.answer(prompt, text, config if i < forced else unaided, name) for i in range(size)]
        metadata = {"save": str(path) if path else ""}
        if prior is not None:
            metadata |= {**prior.metadata, SEARCH_ROUNDS: done + 1}
        groups.append(TrajectoryGroup([*(prior.trajectories if prior else []), *answers], metadata=metadata))
    started = time.monotonic()

    async def score_and_save(group: TrajectoryGroup) -> TrajectoryGroup | None:
        if "save" not in group.metadata:
            return group
        scored = await ctx.score(group)
        if scored is not None:  # its cost goes with it, also where the preflight stage saves it later
            attempts = int(scored.trajectories[0].metrics.get("ruler_attempts", 0)) if scored.trajectories else 0
            before = scored.metadata.get(GROUP_COST, {"seconds": 0.0, "model_calls": {}})
            calls = Counter(before["model_calls"]) + Counter({"policy": size, "judge": attempts})
            scored.metadata[GROUP_COST] = {
                # its answers and its judging, from the start (a search round's added to the earlier rounds')
                "seconds": round(before["seconds"] + time.monotonic() - started, 2),
                "model_calls": {"policy": calls["policy"], "judge": calls["judge"]},
            }
            if path := scored.metadata.pop("save"):
                atomic_text(Path(path), scored.model_dump_json())
        return scored

    await ctx.policy.start()
    return await ctx.gather_judged(groups, desc, score_and_save)


def read_rounds(path: Path) -> int:
    """The search rounds of the group saved at `path` (0 for a group never searched)."""
    return json.loads(path.read_text()).get("metadata", {}).get(SEARCH_ROUNDS, 0)


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
