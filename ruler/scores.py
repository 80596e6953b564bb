"""Judge scores: the result type, the JSON schema the judge must answer with, and answer validation.

The judge answers `{"scores": {"<id>": {"explanation": str, "score": number}, ...}}`. Keying scores by
trajectory id lets the JSON schema itself demand exactly one entry per id (all ids required, no
others allowed), which structured output enforces even on a small local judge. The schema also bounds
each explanation to `EXPLANATION_MAX_CHARS` (`maxLength`; vLLM's xgrammar and guidance backends enforce
it), so a weak judge cannot ramble until `max_tokens` cuts its JSON. Validation checks the answer again,
because not every provider enforces schemas, and clamps scores into [0, 1].
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import BaseModel, Field


class TrajectoryScore(BaseModel):
    """A judge's verdict on one trajectory of a group."""

    trajectory_id: str
    """The trajectory's 1-based position in the group, as a string."""
    explanation: str
    """The judge's short reason for the score."""
    score: float
    """The reward; RULER's scores lie in [0, 1], a custom judge's may use any scale."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """Numbers about the judging to log with the trajectory (token usage, clamps, cache hits)."""
    turn_scores: list[float] | None = None
    """A score per assistant message of the conversation, in order, where the judge scores turns (a program
    judge's `TurnScores`); None: the whole trajectory only. `ruler_score_group` keeps them in the trajectory's
    `metadata["turn_rewards"]`, from which autorl's trainer gives each turn its own advantage."""


TURN_REWARDS = "turn_rewards"
"""The `Trajectory.metadata` key of a reward per assistant message, in order (`ruler_score_group` writes the judge's
turn scores there; autorl's trainer gives each turn its own advantage from them)."""


class TurnScores(NamedTuple):
    """What a `FunctionJudge`'s function may return instead of a number: the trajectory's score, and a score per
    assistant message of the conversation, in order (credit per turn: `TrajectoryScore.turn_scores`). A plain
    list of numbers is read as the turns' scores, the trajectory's being their sum."""

    score: float
    """The trajectory's score (its reward)."""
    turns: list[float]
    """One score per assistant message, in order."""


CUT = "cut"
"""The cause of an invalid answer that ran past its token cap (`InvalidAnswer.cause`)."""


class InvalidAnswer(ValueError):
    """The judge's answer is not a valid set of scores; RULER asks again. `cause` names what was wrong:
    malformed_json, no_scores, wrong_count, bad_score, or `CUT` (any of these in an answer that ran past its
    token cap) (what a call's record keeps, `ruler.calls`)."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class Verdict:
    """One validated score from the judge's answer."""

    explanation: str
    """The judge's reason, stripped; empty when it gave none."""
    score: float
    """Clamped into [0, 1]."""
    clamped: bool
    """Whether the judge's number lay outside [0, 1]."""


EXPLANATION_MAX_CHARS = 120
"""Longest explanation the answer schema allows (one short sentence). xgrammar's compile time grows with it
(about 2 s of CPU at 120 characters, 4 s at 160, once per schema and server)."""


ENTRY_TOKENS = 24
"""Tokens of one id's entry besides its explanation: the id, keys, score and punctuation."""


def answer_tokens(count: int, explain: bool = True) -> int:
    """A `max_tokens` for an answer scoring `count` trajectories, with margin.

    Per id: `ENTRY_TOKENS`, and with `explain` the explanation at `EXPLANATION_MAX_CHARS` counted at 2
    characters a token (English runs near 4); then 25% and 32 tokens on top.
    """
    return int(count * (ENTRY_TOKENS + (EXPLANATION_MAX_CHARS // 2 if explain else 0)) * 1.25) + 32


def response_format(ids: Sequence[str], explain: bool = True) -> dict[str, Any]:
    """The OpenAI `response_format` asking for exactly one score per id, with `explain` each with an explanation
    of bounded length."""
    # the bounds let guided decoding (vLLM) keep even a small judge short and inside [0, 1]
    properties: dict[str, Any] = {"score": {"type": "number", "minimum": 0, "maximum": 1}}
    if explain:
        properties = {"explanation": {"type": "string", "maxLength": EXPLANATION_MAX_CHARS}, **properties}
    entry = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    scores = {
        "type": "object",
        "properties": dict.fromkeys(ids, entry),
        "required": list(ids),
        "additionalProperties": False,
    }
    schema = {"type": "object", "properties": {"scores": scores}, "required": ["scores"], "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "ruler_scores", "schema": schema, "strict": True}}


def is_finite_number(value: Any) -> bool:
    """Whether `value` is a finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise InvalidAnswer(
            f"duplicate keys in the answer: {sorted({k for k in keys if keys.count(k) > 1})}", "malformed_json"
        )
    return dict(pairs)


def parse_verdicts(text: str, ids: Sequence[str]) -> dict[str, Verdict]:
    """Validate the judge's answer text: one finite score per id, every id present, no other ids."""
    try:
        answer = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise InvalidAnswer(
            f"the answer is not JSON ({exc.msg} at char {exc.pos}): {text[:80]!r}", "malformed_json"
        ) from None
    scores = answer.get("scores") if isinstance(answer, dict) else None
    if not isinstance(scores, dict):
        raise InvalidAnswer('the answer has no "scores" object', "no_scores")
    if set(scores) != set(ids):
        missing, extra = sorted(set(ids) - set(scores)), sorted(set(scores) - set(ids))
        raise InvalidAnswer(
            f"{len(scores)} scores for {len(ids)} trajectories (missing ids {missing}, unknown {extra})", "wrong_count"
        )
    verdicts = {}
    for tid in ids:
        entry = scores[tid]
        score = entry.get("score") if isinstance(entry, dict) else None
        if not is_finite_number(score):
            raise InvalidAnswer(f"trajectory {tid} has no finite numeric score: {entry!r:.80}", "bad_score")
        explanation = entry.get("explanation")
        clamped = min(max(float(score), 0.0), 1.0)
        verdicts[tid] = Verdict(
            explanation=explanation.strip() if isinstance(explanation, str) else "",
            score=clamped,
            clamped=clamped != score,
        )
    return verdicts
