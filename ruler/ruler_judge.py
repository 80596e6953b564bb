"""`RulerJudge`: one LLM call scores a whole group of trajectories relative to each other."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from .backend import DEFAULT_JUDGE_MODEL, JudgeClient, JudgeModel, Usage
from .cache import CacheDir, JudgeCache, cache_key
from .prompt import JudgePrompt, Message, as_message_lists, build_judge_prompt
from .retry import RetryPolicy, call_with_retries
from .rubric import DEFAULT_RUBRIC
from .scores import TrajectoryScore, Verdict, parse_verdicts, response_format


class RulerJudge:
    """The RULER judge: asks `judge_model` to score the group's trajectories from 0 to 1 in one request.

    Answers are validated (one score per trajectory, clamped into [0, 1]) and retried with backoff
    when invalid or when the call fails transiently; valid answers are cached on disk. Each returned
    score carries these metrics:
      ruler_attempts     judge requests made for the group (0 when served from the cache)
      ruler_cache_hit    1.0 when served from the cache
      ruler_clamped      1.0 when the judge's number for this trajectory lay outside [0, 1]
      ruler_prompt_tokens, ruler_completion_tokens, ruler_cost_usd
                         this trajectory's share of the group's judge usage over all attempts (summing
                         over the group gives the total); the cost only when the provider prices it
    """

    def __init__(
        self,
        judge_model: str | JudgeModel = DEFAULT_JUDGE_MODEL,
        *,
        retry: RetryPolicy | None = None,
        cache_dir: CacheDir = "auto",
        debug: bool = False,
        name: str = "ruler",
    ):
        self.model = judge_model if isinstance(judge_model, JudgeModel) else JudgeModel.parse(judge_model)
        self.model.check_provider()
        self.retry = retry or RetryPolicy()
        self.cache = JudgeCache.from_setting(cache_dir)
        self.debug = debug
        self.name = name
        self._client = JudgeClient(self.model)
        self._console = Console(stderr=True)

    async def score_group(
        self,
        message_lists: Sequence[Sequence[Message]],
        *,
        rubric: str = DEFAULT_RUBRIC,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[TrajectoryScore]:
        lists = as_message_lists(message_lists, min_trajectories=2)
        prompt = build_judge_prompt(lists, rubric, tools)
        answer_format = response_format(prompt.ids)
        identity = self.model.identity()
        key = cache_key({"judge": identity, "messages": prompt.messages, "response_format": answer_format})
        entry = self.cache.get(key) if self.cache else None
        usage, attempts = Usage(), 0
        if entry is None:
            verdicts, attempts = await call_with_retries(
                lambda: self._ask(prompt, answer_format, usage), self.retry, f"RULER judge {self.model.model}"
            )
            entry = {"judge": identity, "verdicts": {tid: dataclasses.asdict(v) for tid, v in verdicts.items()}}
            if self.cache:
                self.cache.put(key, entry)
        verdicts = {tid: Verdict(**fields) for tid, fields in entry["verdicts"].items()}

        share = 1 / len(lists)
        group_metrics = {
            "ruler_attempts": float(attempts),
            "ruler_cache_hit": float(attempts == 0),
            "ruler_prompt_tokens": usage.prompt_tokens * share,
            "ruler_completion_tokens": usage.completion_tokens * share,
        }
        if usage.cost_usd is not None:
            group_metrics["ruler_cost_usd"] = usage.cost_usd * share
        return [
            TrajectoryScore(
                trajectory_id=str(i),
                explanation=verdicts[tid].explanation,
                score=verdicts[tid].score,
                metrics={**group_metrics, "ruler_clamped": float(verdicts[tid].clamped)},
            )
            for i, tid in enumerate(prompt.id_of, start=1)
        ]

    async def _ask(self, prompt: JudgePrompt, answer_format: dict[str, Any], usage: Usage) -> dict[str, Verdict]:
        if self.debug:
            for message in prompt.messages:
                self._console.rule(f"RULER prompt: {message['role']}")
                self._console.print(message["content"], markup=False, highlight=False)
        text = await self._client.complete(prompt.messages, answer_format, usage)
        if self.debug:
            self._console.rule("RULER answer")
            self._console.print(text, markup=False, highlight=False)
        return parse_verdicts(text, prompt.ids)
