"""Auditing a judge before anyone trains on it: is it a judge, or noise? And are the inputs on the task?

`audit_judge` asks a judge again about groups it has scored: once with each group's answers in reverse
order (RULER's trajectory ids follow the order, so every answer also gets another id, and the request is
another prompt, not the cache's copy of the first answer), and once with the first answer shown a second
time at the end. A judge that ranks answers by what they say keeps its scores; one that ranks by position
turns them around; one that guesses moves them as much as the answers differ. The figures compare the
re-judging noise with the spread between answers; a program judge comes out exactly consistent. The
re-judgings are cached like every RULER answer, so a second audit of the same groups asks nothing.

`check_inputs` asks a judge that reads rubrics, in one request, which of a sample of generated inputs are
requests the task would get.
"""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .judges import Judge, check_scores, judge_name, score_group_of
from .messages import Message
from .prompt import as_message_lists, canonical_json
from .retry import describe
from .rubric import DEFAULT_RUBRIC
from .scores import TrajectoryScore

log = logging.getLogger("ruler")

JudgeVerdict = Literal["reliable", "noisy", "noise", "uninformative"]
"""What the audit concludes: the judge ranks answers by their content (`reliable`), does so with much
noise or bias (`noisy`), ranks them no better than chance or by position (`noise`), or gave every audited
answer the same score, so the audit cannot tell (`uninformative`)."""

RELIABLE = 0.7
"""Reliability from which a judge is `reliable` (its re-judging noise is under 30% of the answers' spread,
in variance)."""
NOISE = 0.3
"""Reliability under which a judge is `noise`: asked again, its scores move nearly as much as answers differ."""
BIAS_SHARE = 0.5
"""A position effect, or a gap between two copies of one answer, above this share of the spread between
answers keeps a judge from `reliable`."""
ROUND_GROUPS = 3
"""Groups re-judged at once; the audit may stop after each round."""
RESAMPLES = 200
"""Bootstrap resamples of the audited groups that test whether the verdict is settled."""
SETTLED = 0.95
"""Share of the resamples whose verdict must equal the audit's for it to stop before its last group."""

VERDICT_WORDS: dict[str, str] = {
    "reliable": "judge reliable",
    "noisy": "judge noisy",
    "noise": "judge indistinguishable from noise",
    "uninformative": "judge uninformative",
}


@dataclass(frozen=True)
class JudgeAudit:
    """The figures of `audit_judge`; scores are on the judge's own scale (RULER's: 0 to 1)."""

    groups: int
    """Groups audited: those with at least two distinct answers that the judge scored again."""
    offered: int
    """Groups given with at least two distinct answers; more than `groups` where the verdict was settled
    before the last of them (the audit is sequential) or a re-judging failed."""
    answers: int
    """Distinct answers in them."""
    attempts: int
    """Judge requests the re-judgings made, as RULER counts them (0 when all came from the cache; 0 for a
    judge that makes no requests, such as a program)."""
    failed: int
    """Re-judgings the judge could not answer (their groups are left out of the figures)."""
    rejudge_gap: float
    """Mean |change| of an answer's score against the other answers of its group when the group is judged
    again in reverse order (the change minus the group's mean change: a shift of a whole group changes no
    comparison within it, and RULER's scores are relative): the judge's noise floor, 0 for a consistent judge."""
    answer_spread: float
    """Mean |difference| between the scores of two answers of one group in the first judging: the
    differences GRPO learns from, which the noise is measured against."""
    reliability: float | None
    """1 - the re-judging noise variance / the variance of the scores within a group (both unbiased, the
    groups' mean shift between judgings removed: RULER's scores are relative). 1: re-judging changes no
    score; 0 or below: the scores move as much as answers differ. None when no score varied."""
    rank_agreement: float | None
    """Spearman correlation between the two judgings of a group, averaged over the groups whose scores
    vary in both (for two answers: +1 the same order, -1 reversed). None when there is no such group."""
    position_effect: float
    """How much an answer's score changes when it moves from the first slot of the prompt to the last
    (positive: the judge favours later answers); fitted over the reversed judgings."""
    duplicate_gap: float
    """Mean |difference| between the scores of an answer and of its copy shown last in the same group."""
    verdict: JudgeVerdict
    reason: str
    """Why, in a few words with the figures."""

    @property
    def reliable(self) -> bool:
        return self.verdict == "reliable"

    def line(self) -> str:
        """The one-line verdict: `judge reliable: <reason>`."""
        return f"{VERDICT_WORDS[self.verdict]}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__}


async def audit_judge(
    judge: Judge,
    groups: Sequence[Sequence[Sequence[Message]]],
    *,
    rubric: str = DEFAULT_RUBRIC,
    tools: list[dict[str, Any]] | None = None,
    task: str | None = None,
    scores: Sequence[Sequence[float]] | None = None,
) -> JudgeAudit:
    """Judge each group again, reversed and with its first answer duplicated, and compare.

    groups: each group's conversations (every one answering the same input), as `ruler_score_group` sends
        them; identical conversations count once, and a group with fewer than two distinct ones is skipped.
    scores: the judge's scores of `groups` as they are (one per conversation), when already known (a
        pipeline's judged groups): then the audit asks only the two re-judgings per group; without them it
        judges each group as it is too (a RULER judge answers that from its cache when it scored it before).
    Makes at most three `score_group` calls per group, `ROUND_GROUPS` groups' calls at once, and stops once the
    verdict is settled (the module's docstring says when); a call that fails is logged and its group left out
    (`failed`).
    """
    prepared = []
    for index, group in enumerate(groups):
        lists = as_message_lists(group, min_trajectories=1)
        first: dict[str, int] = {}
        for position, messages in enumerate(lists):
            first.setdefault(canonical_json(messages), position)
        if len(first) >= 2:
            prepared.append((index, [lists[p] for p in first.values()], list(first.values())))

    async def judged(lists: list[list[Message]]) -> list[TrajectoryScore] | None:
        try:
            result = await score_group_of(judge, lists, rubric=rubric, tools=tools, task=task)
            check_scores(result, len(lists), judge_name(judge))
            return result
        except Exception as exc:
            log.warning("judge audit: judge %s could not score a group again: %s", judge_name(judge), describe(exc))
            return None

    judgings: list[Judging] = []
    attempts = failed = 0
    per_group = 3 if scores is None else 2
    for start in range(0, len(prepared), ROUND_GROUPS):
        batch = prepared[start : start + ROUND_GROUPS]
        calls = []
        for _, distinct, _ in batch:
            if scores is None:
                calls.append(judged(distinct))
            calls += [judged(distinct[::-1]), judged([*distinct, _copy(distinct[0])])]
        results = await asyncio.gather(*calls)
        attempts += sum(int(r[0].metrics.get("ruler_attempts", 0)) for r in results if r)
        for number, (index, _, positions) in enumerate(batch):
            answers = results[number * per_group : (number + 1) * per_group]
            if scores is None:
                given, answers = answers[0], answers[1:]
                first_scores = None if given is None else [s.score for s in given]
            else:
                first_scores = [float(scores[index][p]) for p in positions]
            reversed_scores, duplicated = answers
            if first_scores is None or reversed_scores is None or duplicated is None:
                failed += sum(a is None for a in answers) + (first_scores is None)
                continue
            judgings.append(
                (first_scores, [s.score for s in reversed_scores][::-1], duplicated[0].score, duplicated[-1].score)
            )
        if start + ROUND_GROUPS < len(prepared) and _settled(judgings):
            break
    return _figures(judgings, attempts, failed, offered=len(prepared))


def _settled(judgings: list[Judging]) -> bool:
    """Whether the verdict on `judgings` holds in at least `SETTLED` of `RESAMPLES` bootstrap resamples."""
    if not judgings:
        return False
    verdict = _figures(judgings, 0, 0, offered=len(judgings)).verdict
    rng = random.Random(0)
    agree = sum(
        _figures(rng.choices(judgings, k=len(judgings)), 0, 0, offered=len(judgings)).verdict == verdict
        for _ in range(RESAMPLES)
    )
    return agree >= SETTLED * RESAMPLES


def _copy(messages: list[Message]) -> list[Message]:
    """The conversation with one space added to its last assistant message: the same answer to a reader,
    but a distinct trajectory, so that RULER (which sends identical trajectories once) shows it twice."""
    copy = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(copy) if m.get("role") == "assistant")
    content = copy[last].get("content")
    if isinstance(content, list):
        copy[last]["content"] = [*content, {"type": "text", "text": " "}]
    else:
        copy[last]["content"] = f"{content or ''} "
    return copy


Judging = tuple[list[float], list[float], float, float]
"""One audited group: its scores as first judged, as judged reversed (back in the first order), its first
answer's score and its copy's, in the judging that showed the first answer twice."""


def _figures(judgings: list[Judging], attempts: int, failed: int, *, offered: int) -> JudgeAudit:
    gaps, spreads, duplicates, agreements = [], [], [], []
    noise_sum = noise_df = within_sum = within_df = 0.0
    position_num = position_den = 0.0
    for first, again, original, copy in judgings:
        n = len(first)
        spreads += [abs(first[i] - first[j]) for i in range(n) for j in range(i + 1, n)]
        duplicates.append(abs(original - copy))
        shifts = [a - b for a, b in zip(first, again, strict=True)]
        mean_shift = statistics.fmean(shifts)
        gaps += [abs(d - mean_shift) for d in shifts]
        noise_sum += sum((d - mean_shift) ** 2 for d in shifts) / 2  # each judging's share of the difference
        noise_df += n - 1
        within_sum += sum((s - statistics.fmean(first)) ** 2 for s in first)
        within_sum += sum((s - statistics.fmean(again)) ** 2 for s in again)
        within_df += 2 * (n - 1)
        for position, shift in enumerate(shifts):  # slot p in the first judging, 1 - p in the reversed one
            slot = position / (n - 1)
            position_num += (shift - mean_shift) * (slot - (1 - slot))
            position_den += (slot - (1 - slot)) ** 2
        if len(set(first)) > 1 and len(set(again)) > 1:
            agreements.append(_spearman(first, again))
    noise = noise_sum / noise_df if noise_df else 0.0
    within = within_sum / within_df if within_df else 0.0
    audit = {
        "groups": len(judgings),
        "offered": offered,
        "answers": sum(len(j[0]) for j in judgings),
        "attempts": attempts,
        "failed": failed,
        "rejudge_gap": statistics.fmean(gaps) if gaps else 0.0,
        "answer_spread": statistics.fmean(spreads) if spreads else 0.0,
        "reliability": 1 - noise / within if within > 0 else None,
        "rank_agreement": statistics.fmean(agreements) if agreements else None,
        "position_effect": position_num / position_den if position_den else 0.0,
        "duplicate_gap": statistics.fmean(duplicates) if duplicates else 0.0,
    }
    verdict, reason = _verdict(**audit)
    return JudgeAudit(**audit, verdict=verdict, reason=reason)


def _verdict(
    *,
    groups: int,
    rejudge_gap: float,
    answer_spread: float,
    reliability: float | None,
    position_effect: float,
    duplicate_gap: float,
    **_: Any,
) -> tuple[JudgeVerdict, str]:
    if not groups:
        return "uninformative", "no group with two distinct answers could be judged again"
    again = f"asked again with the answers in reverse order, its scores moved {rejudge_gap:.3f} on average"
    if reliability is None:
        return "uninformative", (
            "it gave every answer of the audited groups the same score, also when asked again: the audit cannot "
            "tell whether it ranks answers"
        )
    spread = f"against {answer_spread:.3f} between answers"
    position = (
        f"its scores follow the answers' positions in the prompt: moved from the first slot to the last, an "
        f"answer's score changes by {position_effect:+.3f}, {spread}"
    )
    copies = f"two copies of one answer were scored {duplicate_gap:.3f} apart, {spread}"
    biased = abs(position_effect) > BIAS_SHARE * answer_spread
    if reliability < NOISE:
        reason = position if biased else f"{again}, about as much as answers differ ({answer_spread:.3f})"
        return "noise", f"{reason} (reliability {reliability:.2f})"
    if reliability < RELIABLE or biased or duplicate_gap > BIAS_SHARE * answer_spread:
        reason = position if biased else copies if duplicate_gap > BIAS_SHARE * answer_spread else f"{again}, {spread}"
        return "noisy", f"{reason} (reliability {reliability:.2f})"
    return "reliable", f"{again}, {spread} (reliability {reliability:.2f})"


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2
        start = end + 1
    return ranks


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (ties ranked by their mean rank); both must vary."""
    return statistics.correlation(_ranks(a), _ranks(b))


INPUTS_REQUEST = "Write one request that a user of the task would send to the agent."
"""What each trajectory of the inputs check answers: the generated input is its reply."""
INPUTS_RUBRIC = """\
These trajectories are not the agent's work: each reply is one user request that was generated for the task, \
to train and test the agent on. Score each request on its own:
- 1: a request that a user of this task would really send, and that the agent is meant to handle.
- 0: off the task, garbled or meaningless, a template or placeholder, or a copy of the instructions.
- In between: a request that only partly fits the task."""
ON_TASK = 0.5
"""An input scored at least this is counted as one the task would get."""


@dataclass(frozen=True)
class InputsCheck:
    """What `check_inputs` found."""

    checked: int
    """Inputs the judge was shown."""
    on_task: int
    """Those it scored at least `ON_TASK`: requests the task would get."""
    scores: list[float] = field(default_factory=list)
    """Its score of each input, in order."""
    off_task: list[str] = field(default_factory=list)
    """The inputs it scored under `ON_TASK`."""
    attempts: int = 0
    """Judge requests made (0 from the cache)."""

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__}


def reads_rubric(judge: Any) -> bool:
    """Whether the judge is a model that reads the rubric and the task (its class sets `reads_rubric = True`,
    as `RulerJudge` does), so that it can be asked about anything, such as whether an input fits the task."""
    return bool(getattr(judge, "reads_rubric", False))


async def check_inputs(judge: Judge, inputs: Sequence[str], *, task: str) -> InputsCheck:
    """Ask `judge` (one that `reads_rubric`), in one group, which of `inputs` are requests the task would get."""
    lists = [[{"role": "user", "content": INPUTS_REQUEST}, {"role": "assistant", "content": text}] for text in inputs]
    scores = await score_group_of(judge, lists, rubric=INPUTS_RUBRIC, tools=None, task=task)
    check_scores(scores, len(lists), judge_name(judge))
    values = [s.score for s in scores]
    return InputsCheck(
        checked=len(values),
        on_task=sum(v >= ON_TASK for v in values),
        scores=values,
        off_task=[text for text, v in zip(inputs, values, strict=True) if v < ON_TASK],
        attempts=int(scores[0].metrics.get("ruler_attempts", 0)) if scores else 0,
    )
