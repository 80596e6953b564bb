"""The ART-compatible entry points: `ruler` scores conversations, `ruler_score_group` rewards a group."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self, TypeVar

from .cache import CacheDir
from .client import DEFAULT_JUDGE_MODEL, JudgeModel
from .judges import Judge, check_scores, check_turn_scores, judge_name, score_group_of
from .loading import as_judge
from .messages import Message
from .prompt import as_message_lists, canonical_json
from .retry import RetryPolicy, describe
from .rubric import DEFAULT_RUBRIC
from .ruler_judge import RULER_NAME, RulerJudge
from .scores import TURN_REWARDS, TrajectoryScore

log = logging.getLogger("ruler")


class TrajectoryLike(Protocol):
    """What `ruler_score_group` reads and writes of a trajectory: autorl's and ART's `Trajectory` have it."""

    tools: list[dict[str, Any]] | None
    reward: float
    metrics: dict[str, float | int | bool]

    def messages(self) -> list[Message]: ...

    def log(self, message: str) -> None: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


class TrajectoryGroupLike(Protocol):
    """What `ruler_score_group` reads of a group: autorl's and ART's `TrajectoryGroup` have it."""

    @property
    def trajectories(self) -> Sequence[TrajectoryLike]: ...

    def __len__(self) -> int: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


Group = TypeVar("Group", bound=TrajectoryGroupLike)


async def ruler(
    message_lists: Sequence[Sequence[Message]],
    judge_model: str | JudgeModel = DEFAULT_JUDGE_MODEL,
    rubric: str = DEFAULT_RUBRIC,
    tools: list[dict[str, Any]] | None = None,
    *,
    retry: RetryPolicy | None = None,
    cache_dir: CacheDir = "auto",
    debug: bool = False,
    task: str | None = None,
) -> list[TrajectoryScore]:
    """Score the conversations of one group relative to each other with one judge request.

    message_lists: one chat conversation per trajectory, all answering the same input.
    judge_model: a LiteLLM model string, "embedded", "name@http://host:port/v1", or a `JudgeModel`.
    tools: the tool definitions the agent had, shown to the judge.
    task: the user's description of the agent's task, stated in the judge's instructions beside the rubric.
    retry: attempts and backoff for invalid answers and transient failures.
    cache_dir: the judge cache directory; "auto" for `$AUTORL_HOME/cache/ruler` or `./.autorl/cache/ruler`; None: off.
    debug: print the judge prompt and answer.
    Returns one `TrajectoryScore` per conversation, in order.
    """
    judge = RulerJudge(judge_model, retry=retry, cache_dir=cache_dir, debug=debug)
    return await judge.score_group(message_lists, rubric=rubric, tools=tools, task=task)


def group_tools(group: TrajectoryGroupLike) -> list[dict[str, Any]] | None:
    """The distinct tool definitions offered in any trajectory of the group, in first-seen order."""
    tools = {canonical_json(tool): tool for t in group.trajectories for tool in t.tools or []}
    return list(tools.values()) or None


async def ruler_score_group(
    group: Group,
    judge_model: str | JudgeModel | Judge = DEFAULT_JUDGE_MODEL,
    rubric: str = DEFAULT_RUBRIC,
    *,
    swallow_exceptions: bool = False,
    retry: RetryPolicy | None = None,
    cache_dir: CacheDir = "auto",
    debug: bool = False,
    task: str | None = None,
) -> Group | None:
    """A copy of `group` (an autorl or ART `TrajectoryGroup`, or any `TrajectoryGroupLike`) whose rewards are
    the judge's scores.

    Each trajectory keeps its old reward in `metrics["independent_reward"]`, gets the score in
    `metrics["ruler_score"]` and as `reward`, the judge's metrics, and the explanation in its logs (RULER's as
    ART writes it, "RULER explanation: ..."; another judge's as "<its name>: ..."); a judge's turn scores
    (`TrajectoryScore.turn_scores`) go into its `metadata["turn_rewards"]` (`TURN_REWARDS`).
    `judge_model` may also be any judge, or a `module:attribute` spec (see `ruler.load_judge`); the
    tools of the group's trajectories are shown to the judge.
    task: the user's description of the agent's task, shown to the judge; a custom judge whose
        `score_group` has no `task` parameter (nor `**kwargs`) is called without it.
    swallow_exceptions: when scoring fails, log the reason and return None instead of raising. A judge
        spec that does not resolve always raises.
    """
    judge = as_judge(judge_model, retry=retry, cache_dir=cache_dir, debug=debug)
    name = judge_name(judge)
    try:
        message_lists = as_message_lists([t.messages() for t in group.trajectories], min_trajectories=1)
        scores = await score_group_of(judge, message_lists, rubric=rubric, tools=group_tools(group), task=task)
        check_scores(scores, len(group), name)
        check_turn_scores(scores, message_lists, name)
    except Exception as exc:
        if not swallow_exceptions:
            raise
        log.warning("judge %s could not score a group of %d trajectories: %s", name, len(group), describe(exc))
        return None
    trajectories = []
    for trajectory, score in zip(group.trajectories, scores, strict=True):
        scored = trajectory.model_copy(deep=True)
        scored.metrics["independent_reward"] = trajectory.reward
        scored.metrics["ruler_score"] = score.score
        scored.metrics.update(score.metrics)
        scored.reward = score.score
        if score.turn_scores is not None and isinstance(getattr(scored, "metadata", None), dict):
            scored.metadata[TURN_REWARDS] = list(score.turn_scores)
        scored.log(f"{'RULER explanation' if name == RULER_NAME else name}: {score.explanation}")  # ART's wording
        trajectories.append(scored)
    return group.model_copy(update={"trajectories": trajectories})
