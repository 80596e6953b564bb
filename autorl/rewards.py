"""ART's `art.rewards` path: RULER with ART's argument order (`judge_model`, `extra_litellm_params`, `rubric`).

`ruler` and `ruler_score_group` are ruler's (`ruler.api`), which take the rubric third; here the third is
ART's `extra_litellm_params`, LiteLLM settings of the judge call: `temperature` and `max_tokens` set
the `ruler.JudgeModel` fields, `base_url` / `api_base` its endpoint, anything else goes to LiteLLM as given
(credentials are refused: name the key's variable with `JudgeModel.api_key_env`). Keywords of ruler's own
(`task`, `retry`, `cache_dir`) pass through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ruler import api as ruler_api
from ruler.client import DEFAULT_JUDGE_MODEL, JudgeModel
from ruler.errors import JudgeSpecError
from ruler.judges import Judge
from ruler.messages import Message
from ruler.rubric import DEFAULT_RUBRIC
from ruler.scores import TrajectoryScore

__all__ = ["DEFAULT_RUBRIC", "ruler", "ruler_score_group"]
JUDGE_FIELDS = ("temperature", "max_tokens")


def judge_with_params(
    judge_model: str | JudgeModel | Judge, extra_litellm_params: dict[str, Any] | None
) -> str | JudgeModel | Judge:
    """`judge_model` with ART's `extra_litellm_params` applied (a spec string becomes a `JudgeModel`)."""
    if not extra_litellm_params:
        return judge_model
    if isinstance(judge_model, str):
        judge_model = JudgeModel.parse(judge_model)
    if not isinstance(judge_model, JudgeModel):
        raise JudgeSpecError("extra_litellm_params sets how a judge model is called; this judge is no model")
    params = dict(extra_litellm_params)
    fields = {name: params.pop(name) for name in JUDGE_FIELDS if name in params}
    base_url = params.pop("base_url", None) or params.pop("api_base", None)
    if base_url:
        fields["base_url"] = base_url
    try:
        return JudgeModel.model_validate(
            {**judge_model.model_dump(), **fields, "extra_params": {**judge_model.extra_params, **params}}
        )
    except ValidationError as exc:
        raise JudgeSpecError(f"extra_litellm_params: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None


async def ruler(
    message_lists: Sequence[Sequence[Message]],
    judge_model: str | JudgeModel = DEFAULT_JUDGE_MODEL,
    extra_litellm_params: dict[str, Any] | None = None,
    rubric: str | None = DEFAULT_RUBRIC,
    tools: list[dict[str, Any]] | None = None,
    *,
    debug: bool = False,
    **options: Any,
) -> list[TrajectoryScore]:
    """`ruler.ruler` (one judge request scores a group of conversations) in ART's argument order."""
    judge = judge_with_params(judge_model, extra_litellm_params)
    return await ruler_api.ruler(message_lists, judge, rubric or DEFAULT_RUBRIC, tools, debug=debug, **options)


async def ruler_score_group(
    group: ruler_api.Group,
    judge_model: str | JudgeModel | Judge = DEFAULT_JUDGE_MODEL,
    extra_litellm_params: dict[str, Any] | None = None,
    rubric: str | None = DEFAULT_RUBRIC,
    *,
    swallow_exceptions: bool = False,
    debug: bool = False,
    **options: Any,
) -> ruler_api.Group | None:
    """`ruler.ruler_score_group` (a copy of the group with the judge's scores as rewards; None when it fails
    and `swallow_exceptions`) in ART's argument order."""
    judge = judge_with_params(judge_model, extra_litellm_params)
    return await ruler_api.ruler_score_group(
        group, judge, rubric or DEFAULT_RUBRIC, swallow_exceptions=swallow_exceptions, debug=debug, **options
    )
