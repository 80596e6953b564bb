"""`RulerJudge`: one LLM call scores a whole group of trajectories relative to each other."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from . import tracing
from .cache import CacheDir, JudgeCache, cache_key
from .calls import OK, CallRecord, failure_cause
from .client import (
    DEFAULT_JUDGE_MODEL,
    JudgeClient,
    JudgeModel,
    Usage,
    is_context_overflow,
    stated_context_tokens,
)
from .errors import JudgeFailedError
from .messages import Message
from .prompt import JudgePrompt, as_message_lists, build_judge_prompt, canonical_json
from .retry import RetryPolicy, call_with_retries
from .rubric import DEFAULT_RUBRIC
from .scores import CUT, InvalidAnswer, TrajectoryScore, Verdict, answer_tokens, parse_verdicts, response_format

log = logging.getLogger("ruler")

PROMPT_MARGIN_TOKENS = 32
"""Tokens of the context left unused by a fitted request, beyond the answer's reserve."""
OVERFLOW_SHRINK = 0.7
"""After the provider reports a context overflow, the prompt is fitted to this share of its previous size."""


RULER_NAME = "ruler"
"""The RULER judge's name (its metrics' prefix; its explanations are logged as ART does, "RULER explanation: ...")."""


class RulerJudge:
    """The RULER judge: asks `judge_model` to score the group's trajectories from 0 to 1 in one request.

    Answers are validated (one score per trajectory, clamped into [0, 1]) and retried with backoff
    when invalid or when the call fails transiently; valid answers are cached on disk.

    The judge's system message states the task (when given) and the rubric. When the judge's context is
    known (`JudgeModel.context_limit()`: `context_tokens`, or the embedded server's `max_model_len`), each
    request reserves `max_tokens` for the answer (`JudgeModel.max_tokens`, else `answer_tokens(ids)`) and the
    prompt is fitted into the rest by shortening the longest message texts (`build_judge_prompt`); a group
    that cannot fit even at the floor raises `RulerInputError`. A provider's context-overflow error (with a
    known or unknown context) makes RULER fit the prompt to 70% of its size and ask once more.

    Each returned score carries these metrics:
      ruler_attempts     judge requests made for the group (0 when served from the cache)
      ruler_cache_hit    1.0 when served from the cache
      ruler_clamped      1.0 when the judge's number for this trajectory lay outside [0, 1]
      ruler_shortened    1.0 when a message of this trajectory (or the context it shares) was shortened
                         to fit the judge's context
      ruler_prompt_tokens, ruler_completion_tokens, ruler_cost_usd
                         this trajectory's share of the group's judge usage over all attempts (summing
                         over the group gives the total); the cost only when the provider prices it
    """

    reads_rubric = True
    """A model that reads the rubric and the task: it can be asked about anything (`ruler.audit.check_inputs`)."""

    def __init__(
        self,
        judge_model: str | JudgeModel = DEFAULT_JUDGE_MODEL,
        *,
        retry: RetryPolicy | None = None,
        cache_dir: CacheDir = "auto",
        debug: bool = False,
        name: str = RULER_NAME,
        explain: bool = True,
    ):
        self.explain = explain
        """Ask for a short explanation with each score (ART's RULER does); false: the scores alone, a few tokens
        an answer instead of dozens (`autorl run` asks for explanations only where its report shows them)."""
        self.model = judge_model if isinstance(judge_model, JudgeModel) else JudgeModel.parse(judge_model)
        self.model.check_provider()
        self.retry = retry or RetryPolicy()
        self.cache = JudgeCache.from_setting(cache_dir)
        self.debug = debug
        self.name = name
        self._client = JudgeClient(self.model)
        self._console = Console(stderr=True)
        self.calls: list[CallRecord] = []
        """Every request this judge made, in order (`ruler.calls`): what each took and how it ended."""

    async def score_group(
        self,
        message_lists: Sequence[Sequence[Message]],
        *,
        rubric: str = DEFAULT_RUBRIC,
        tools: list[dict[str, Any]] | None = None,
        task: str | None = None,
    ) -> list[TrajectoryScore]:
        """Score the group in one judge request; `task` (the user's task description) is shown to the judge.

        The cache key covers the judge, the prompt (task, rubric, tools, trajectories) and the answer schema.
        """
        lists = as_message_lists(message_lists, min_trajectories=1)  # one alone is scored, as ART's RULER does
        context = self.model.context_limit()
        prompt, max_tokens = self._fit(lists, rubric, tools, task, context)
        answer_format = response_format(prompt.ids, self.explain)
        identity = self.model.identity()
        key = cache_key({"judge": identity, "messages": prompt.messages, "response_format": answer_format})
        entry = self.cache.get(key) if self.cache else None
        usage, attempts = Usage(), 0
        if entry is None:
            what = f"RULER judge {self.model.model}"
            try:
                plain = functools.partial(self._fit, lists, rubric, tools, task, context, explain=False)
                asking = _Asking(self, prompt, answer_format, max_tokens, usage, plain)
                verdicts, attempts = await call_with_retries(asking.attempt, self.retry, what)
                prompt = asking.prompt
            except JudgeFailedError as exc:
                if not is_context_overflow(exc.__cause__):
                    raise
                known = [c for c in (context, stated_context_tokens(exc.__cause__)) if c]
                size = prompt.estimated_tokens
                if known:  # the answer's reserve comes out of a known context
                    size = min(size, min(known) - self._reserve(len(prompt.ids)) - PROMPT_MARGIN_TOKENS)
                    max_tokens = max_tokens or self._reserve(len(prompt.ids))
                log.warning("%s: the prompt overflowed the judge's context; shortening it and asking once more", what)
                budget = int(OVERFLOW_SHRINK * size)
                refitted = build_judge_prompt(
                    lists, rubric, tools, task=task, max_prompt_tokens=budget, explain=self.explain
                )
                verdicts, more = await call_with_retries(
                    lambda: self._ask(refitted, answer_format, usage, max_tokens), self.retry, what
                )
                attempts, prompt = exc.attempts + more, refitted
            entry = {
                "judge": identity,
                "verdicts": {tid: dataclasses.asdict(v) for tid, v in verdicts.items()},
                "shortened": prompt.shortened,
            }
            if self.cache:
                self.cache.put(key, entry)
        verdicts = {tid: Verdict(**fields) for tid, fields in entry["verdicts"].items()}
        shortened = entry.get("shortened", prompt.shortened)

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
                metrics={
                    **group_metrics,
                    "ruler_clamped": float(verdicts[tid].clamped),
                    "ruler_shortened": float(cut),
                },
            )
            for i, (tid, cut) in enumerate(zip(prompt.id_of, shortened, strict=True), start=1)
        ]

    def _reserve(self, count: int, explain: bool | None = None) -> int:
        """The tokens kept free for an answer scoring `count` trajectories: the model's `max_tokens`, else sized
        (with explanations unless `explain` is false; None: `self.explain`)."""
        return self.model.max_tokens or answer_tokens(count, self.explain if explain is None else explain)

    def _fit(
        self,
        lists: list[list[Message]],
        rubric: str,
        tools: list[dict[str, Any]] | None,
        task: str | None,
        context: int | None,
        explain: bool | None = None,
    ) -> tuple[JudgePrompt, int | None]:
        """The prompt, fitted into `context` when known, and the `max_tokens` to send (None: the model's); asking
        for explanations unless `explain` is false (None: `self.explain`)."""
        explain = self.explain if explain is None else explain
        if context is None:
            return build_judge_prompt(lists, rubric, tools, task=task, explain=explain), None
        reserve = self._reserve(len({canonical_json(messages) for messages in lists}), explain)
        budget = context - reserve - PROMPT_MARGIN_TOKENS
        prompt = build_judge_prompt(lists, rubric, tools, task=task, max_prompt_tokens=budget, explain=explain)
        return prompt, reserve

    async def _ask(
        self, prompt: JudgePrompt, answer_format: dict[str, Any], usage: Usage, max_tokens: int | None = None
    ) -> dict[str, Verdict]:
        """One request for the group's scores; recorded in `calls` however it ends."""
        if self.debug:
            for message in prompt.messages:
                self._console.rule(f"RULER prompt: {message['role']}")
                self._console.print(message["content"], markup=False, highlight=False)
        started, before = time.monotonic(), dataclasses.replace(usage)
        outcome = OK
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": self.model.model,
            "ruler.prompt.chars": sum(len(str(m.get("content") or "")) for m in prompt.messages),
            "ruler.prompt.estimated_tokens": prompt.estimated_tokens,
            "ruler.answers": len(prompt.ids),
        }
        with tracing.span(f"chat {self.model.model}", attributes) as span:
            try:
                text, finish = await self._client.complete(prompt.messages, answer_format, usage, max_tokens)
                if self.debug:
                    self._console.rule("RULER answer")
                    self._console.print(text, markup=False, highlight=False)
                try:
                    return parse_verdicts(text, prompt.ids)
                except InvalidAnswer as exc:
                    if finish != "length":
                        raise
                    raise InvalidAnswer(f"the answer ran past its token cap: {exc}", CUT) from exc
            except Exception as exc:
                outcome = failure_cause(exc)
                raise
            finally:
                record = CallRecord(
                    self.model.model,
                    time.monotonic() - started,
                    usage.prompt_tokens - before.prompt_tokens,
                    usage.completion_tokens - before.completion_tokens,
                    outcome,
                    started,
                )
                self.calls.append(record)
                if span is not None:
                    span.set_attributes(record.span_attributes())


class _Asking:
    """The judge request that `call_with_retries` repeats for one group. An answer with explanations that runs
    past its token cap is not asked again as it was (the same cap cuts it again, minutes of decoding on a small
    judge): the attempts after it ask for the scores alone (`plain`: that prompt and its cap), which fit."""

    def __init__(
        self,
        judge: RulerJudge,
        prompt: JudgePrompt,
        answer_format: dict[str, Any],
        cap: int | None,
        usage: Usage,
        plain: Callable[[], tuple[JudgePrompt, int | None]],
    ):
        self.judge, self.prompt, self.answer_format, self.cap, self.usage = judge, prompt, answer_format, cap, usage
        self.plain: Callable[[], tuple[JudgePrompt, int | None]] | None = plain
        """The prompt without explanations and its cap, once; None after it was taken."""

    async def attempt(self) -> dict[str, Verdict]:
        try:
            return await self.judge._ask(self.prompt, self.answer_format, self.usage, self.cap)
        except InvalidAnswer as exc:
            if exc.cause == CUT and self.judge.explain and self.plain is not None:
                self.prompt, self.cap = self.plain()
                self.answer_format, self.plain = response_format(self.prompt.ids, explain=False), None
                log.warning(
                    "RULER judge %s: an answer with explanations was cut; asking for the scores alone",
                    self.judge.model.model,
                )
            raise
