"""The judge protocol, and the judges built from Python: `FunctionJudge` and `CombinedJudge`.

A judge is any object with
    async def score_group(self, message_lists, *, rubric, tools, task=None) -> list[TrajectoryScore]
returning one score per conversation, in order; `task` is the user's task description (None when
unknown). `RulerJudge` (the LLM judge) is one; a user's own class is another. A judge may carry a
`name` attribute, used in logs and metric names.

A judge written before `task` existed (`score_group(self, message_lists, *, rubric, tools)`) still
works: `score_group_of` passes `task` only to a `score_group` that declares a `task` parameter or
`**kwargs`, and calls the others without it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from .errors import JudgeFailedError, JudgeSpecError
from .messages import Message
from .prompt import as_message_lists
from .rubric import DEFAULT_RUBRIC
from .scores import TrajectoryScore, TurnScores, is_finite_number

ScoreFunction = Callable[
    [list[Message]], float | TurnScores | list[float] | Awaitable[float | TurnScores | list[float]]
]


@runtime_checkable
class Judge(Protocol):
    """Scores the conversations of one group; `rubric`, `tools` and `task` are there for judges that use them.

    `task` may be left out of a judge's signature: such a judge is called without it (see `score_group_of`).
    """

    async def score_group(
        self,
        message_lists: Sequence[Sequence[Message]],
        *,
        rubric: str,
        tools: list[dict[str, Any]] | None,
        task: str | None = None,
    ) -> list[TrajectoryScore]: ...


def is_judge(obj: Any) -> bool:
    """Whether `obj` (an instance, not a class) has an async `score_group` method."""
    return not inspect.isclass(obj) and inspect.iscoroutinefunction(getattr(obj, "score_group", None))


def judge_name(judge: Any) -> str:
    """The judge's `name` attribute, else its class name."""
    return getattr(judge, "name", None) or type(judge).__name__


def takes_task(judge: Any) -> bool:
    """Whether the judge's `score_group` declares a `task` parameter or `**kwargs`."""
    try:
        parameters = inspect.signature(judge.score_group).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        (p.name == "task" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)) or p.kind is p.VAR_KEYWORD
        for p in parameters
    )


async def score_group_of(
    judge: Judge,
    message_lists: Sequence[Sequence[Message]],
    *,
    rubric: str,
    tools: list[dict[str, Any]] | None,
    task: str | None = None,
) -> list[TrajectoryScore]:
    """`judge.score_group(...)`, with `task` passed only when the judge's `score_group` takes it."""
    if takes_task(judge):
        return await judge.score_group(message_lists, rubric=rubric, tools=tools, task=task)
    return await judge.score_group(message_lists, rubric=rubric, tools=tools)


def check_scores(scores: object, trajectories: int, judge: str) -> None:
    """Raise `JudgeFailedError`, in one line naming what is wrong, unless a judge returned a list of one
    `TrajectoryScore` per trajectory, each with a finite score (a custom judge's bug is caught here, before
    a NaN or a string reaches training)."""
    if isinstance(scores, str | bytes) or not isinstance(scores, Sequence):
        raise JudgeFailedError(
            f"judge {judge} returned {type(scores).__name__} {scores!r:.60}; score_group must return a list of "
            "TrajectoryScore"
        )
    if len(scores) != trajectories:
        raise JudgeFailedError(f"judge {judge} returned {len(scores)} scores for {trajectories} trajectories")
    for i, score in enumerate(scores, start=1):
        if not isinstance(score, TrajectoryScore):
            raise JudgeFailedError(
                f"judge {judge} returned {type(score).__name__} {score!r:.60} for trajectory {i}; expected a TrajectoryScore"
            )
        if not is_finite_number(score.score):
            raise JudgeFailedError(
                f"judge {judge} gave trajectory {i} the score {score.score!r}; expected a finite number"
            )
        if score.turn_scores is not None and not all(is_finite_number(s) for s in score.turn_scores):
            raise JudgeFailedError(f"judge {judge} gave trajectory {i} the turn scores {score.turn_scores!r:.80}")


def check_turn_scores(
    scores: Sequence[TrajectoryScore], message_lists: Sequence[Sequence[Message]], judge: str
) -> None:
    """Raise `JudgeFailedError` unless each score's `turn_scores`, where given, has one entry per assistant message
    of its conversation."""
    for i, (score, messages) in enumerate(zip(scores, message_lists, strict=True), start=1):
        turns = sum(m.get("role") == "assistant" for m in messages)
        if score.turn_scores is not None and len(score.turn_scores) != turns:
            raise JudgeFailedError(
                f"judge {judge} gave trajectory {i} {len(score.turn_scores)} turn scores for {turns} assistant messages"
            )


class FunctionJudge:
    """Scores each trajectory on its own with a plain function `(messages) -> float`, sync or async.

    The function sees the conversation as chat message dicts; its score is used as is (any scale). It may score
    turns too (credit per turn): a `TurnScores(score, turns)`, or a list of numbers, one per assistant message
    (the trajectory's score is then their sum), gives `TrajectoryScore.turn_scores`.
    """

    def __init__(self, fn: ScoreFunction, name: str | None = None):
        if not callable(fn):
            raise JudgeSpecError(f"FunctionJudge needs a function (messages) -> float, got {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)

    async def score_group(
        self,
        message_lists: Sequence[Sequence[Message]],
        *,
        rubric: str = DEFAULT_RUBRIC,
        tools: list[dict[str, Any]] | None = None,
        task: str | None = None,
    ) -> list[TrajectoryScore]:
        """Score each conversation with the function; `rubric`, `tools` and `task` are not used."""

        async def score(messages: list[Message]) -> float:
            result = self.fn(messages)
            return await result if inspect.isawaitable(result) else result

        lists = as_message_lists(message_lists, min_trajectories=1)
        values = await asyncio.gather(*(score(messages) for messages in lists))
        scores = []
        for i, value in enumerate(values, start=1):
            turns = None
            if isinstance(value, TurnScores):
                value, turns = value.score, list(value.turns)
            elif isinstance(value, list | tuple):
                turns = list(value)
                value = sum(turns) if all(is_finite_number(t) for t in turns) else value
            if not is_finite_number(value) or not all(is_finite_number(t) for t in turns or ()):
                raise JudgeFailedError(f"judge {self.name} gave trajectory {i} the score {value!r}; expected a number")
            explanation = f"{self.name} = {value:.4g}" + (
                f" (turns {', '.join(f'{t:.3g}' for t in turns)})" if turns else ""
            )
            scores.append(
                TrajectoryScore(trajectory_id=str(i), explanation=explanation, score=value, turn_scores=turns)
            )
        check_turn_scores(scores, lists, self.name)
        return scores


class CombinedJudge:
    """A weighted sum of judges' scores; the judges score each group concurrently, each given `task` if it takes it.

    Each trajectory's metrics get `<name>_score` for every judge, and every judge's own metrics as
    `<name>/<metric>`. Weights default to equal shares summing to 1. Where some of the judges score turns, the
    turn scores are the weighted sum of theirs (the other judges' part is in the trajectory's score alone).
    """

    def __init__(self, judges: Sequence[Judge], weights: Sequence[float] | None = None, name: str = "combined"):
        judges = list(judges)
        if not judges:
            raise JudgeSpecError("CombinedJudge needs at least one judge")
        weights = [1 / len(judges)] * len(judges) if weights is None else list(weights)
        if not_judges := [type(j).__name__ for j in judges if not is_judge(j)]:
            raise JudgeSpecError(f"CombinedJudge got objects that are not judges (no async score_group): {not_judges}")
        if len(weights) != len(judges) or not all(is_finite_number(w) for w in weights):
            raise JudgeSpecError(f"CombinedJudge needs one finite weight per judge, got {weights} for {len(judges)}")
        self.judges, self.weights, self.name = judges, weights, name
        names = [judge_name(j) for j in judges]
        self.names = [n if names[:i].count(n) == 0 else f"{n}_{names[:i].count(n) + 1}" for i, n in enumerate(names)]

    async def score_group(
        self,
        message_lists: Sequence[Sequence[Message]],
        *,
        rubric: str = DEFAULT_RUBRIC,
        tools: list[dict[str, Any]] | None = None,
        task: str | None = None,
    ) -> list[TrajectoryScore]:
        results = await asyncio.gather(
            *(score_group_of(j, message_lists, rubric=rubric, tools=tools, task=task) for j in self.judges)
        )
        for name, scores in zip(self.names, results, strict=True):
            check_scores(scores, len(message_lists), name)
        combined = []
        for i, per_judge in enumerate(zip(*results, strict=True), start=1):
            metrics: dict[str, float] = {}
            for name, score in zip(self.names, per_judge, strict=True):
                metrics[f"{name}_score"] = score.score
                metrics.update({f"{name}/{key}": value for key, value in score.metrics.items()})
            combined.append(
                TrajectoryScore(
                    trajectory_id=str(i),
                    explanation="; ".join(f"{n}: {s.explanation}" for n, s in zip(self.names, per_judge, strict=True)),
                    score=sum(w * s.score for w, s in zip(self.weights, per_judge, strict=True)),
                    metrics=metrics,
                    turn_scores=_weighted_turns(self.weights, per_judge),
                )
            )
        return combined


def _weighted_turns(weights: Sequence[float], scores: Sequence[TrajectoryScore]) -> list[float] | None:
    """The weighted sum of the turn scores of the judges that gave them (None where none did)."""
    given = [(w, s.turn_scores) for w, s in zip(weights, scores, strict=True) if s.turn_scores is not None]
    if not given:
        return None
    if len({len(turns) for _, turns in given}) > 1:
        raise JudgeFailedError(f"the judges gave different numbers of turn scores: {[len(t) for _, t in given]}")
    return [sum(w * turns[k] for w, turns in given) for k in range(len(given[0][1]))]
