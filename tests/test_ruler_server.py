"""RULER against a real HTTP server on 127.0.0.1 that speaks OpenAI's chat completions API.

The server replies from a script (valid answers, malformed JSON, wrong counts, out-of-range scores,
429s, 5xx, slow replies), so these tests drive RULER's real LiteLLM call path, retries, validation
and disk cache end to end, and count the requests that reached the server.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest

import ruler
from autorl.trajectories import Trajectory, TrajectoryGroup
from ruler import JudgeFailedError, RetryPolicy, RulerJudge
from ruler.calls import summarize
from tests.helpers.judge_server import FakeJudgeServer, Reply, scores_json

FAST_RETRY = RetryPolicy(max_attempts=4, outage_s=1.5, initial_backoff_s=0.01, max_backoff_s=0.05, jitter=0)


@pytest.fixture
def server():
    with FakeJudgeServer() as fake:
        yield fake


def conversation(question: str, answer: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer},
    ]


def run(coro):
    return asyncio.run(coro)


def test_retries_clamps_and_serves_repeats_from_cache(server, tmp_path):
    judge = RulerJudge(server.judge_model(), retry=FAST_RETRY, cache_dir=tmp_path)
    group_a = [conversation("2+2?", "4"), conversation("2+2?", "5"), conversation("2+2?", "4")]
    group_b = [conversation("3*3?", "9"), conversation("3*3?", "6")]
    group_c = [conversation("10-7?", "3"), conversation("10-7?", "I don't know")]
    server.script.extend(
        [
            Reply(content=scores_json(_1=0.9, _2=0.2)),  # group A: valid at once
            Reply(content='{"scores": {"1": {"explanation": "ok", "score": 0.8'),  # group B: malformed JSON
            Reply(content=scores_json(_1=0.8)),  # group B: wrong count
            Reply(content=scores_json(_1=7, _2=0.1)),  # group B: a score of 7, clamped to 1
            Reply(status=429, content="rate limited"),  # group C: 429
            Reply(content=scores_json(_1=1.0, _2=0.0)),  # group C: valid
        ]
    )

    a = run(judge.score_group(group_a, rubric=ruler.DEFAULT_RUBRIC))
    assert [s.score for s in a] == [0.9, 0.2, 0.9]  # the identical first and third share one verdict
    assert [s.trajectory_id for s in a] == ["1", "2", "3"]
    assert len(server.requests) == 1
    prompt = server.requests[0]["messages"][1]["content"]
    assert prompt.count('<trajectory id="') == 2  # identical trajectories are sent once
    assert prompt.count("You are a careful calculator.") == 1  # the shared prefix is sent once
    schema = server.requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["scores"]["required"] == ["1", "2"]

    b = run(judge.score_group(group_b, rubric=ruler.DEFAULT_RUBRIC))
    assert len(server.requests) == 4
    assert [s.score for s in b] == [1.0, 0.1]
    assert [s.metrics["ruler_clamped"] for s in b] == [1.0, 0.0]
    assert b[0].metrics["ruler_attempts"] == 3
    assert sum(s.metrics["ruler_prompt_tokens"] for s in b) == 300  # usage of all three attempts
    assert sum(s.metrics["ruler_completion_tokens"] for s in b) == 60

    c = run(judge.score_group(group_c, rubric=ruler.DEFAULT_RUBRIC))
    assert len(server.requests) == 6
    assert [s.score for s in c] == [1.0, 0.0]
    assert c[0].metrics["ruler_attempts"] == 2

    # Every request is on record with how it ended: the retries' causes, the tokens of each answer.
    assert [call.outcome for call in judge.calls] == ["ok", "malformed_json", "wrong_count", "ok", "rate_limited", "ok"]
    assert [call.completion_tokens for call in judge.calls] == [20, 20, 20, 20, 0, 20]
    assert all(call.seconds > 0 and call.model == judge.model.model for call in judge.calls)
    (summary,) = summarize(judge.calls).values()
    assert (summary["calls"], summary["failed"]) == (6, {"malformed_json": 1, "rate_limited": 1, "wrong_count": 1})

    again_a = run(judge.score_group(group_a, rubric=ruler.DEFAULT_RUBRIC))
    again_b = run(
        ruler.ruler(group_b, server.judge_model(), retry=FAST_RETRY, cache_dir=tmp_path)
    )  # a new judge, same cache
    assert len(server.requests) == 6  # both served from the disk cache
    assert [s.score for s in again_a] == [0.9, 0.2, 0.9]
    assert [s.score for s in again_b] == [1.0, 0.1]
    assert again_b[0].metrics["ruler_clamped"] == 1.0
    assert all(s.metrics["ruler_cache_hit"] == 1.0 and s.metrics["ruler_attempts"] == 0 for s in again_a + again_b)

    server.script.append(Reply(content=scores_json(_1=0.5, _2=0.4)))
    other_rubric = run(judge.score_group(group_a, rubric="Shorter is better."))
    assert len(server.requests) == 7  # the rubric is part of the cache key
    assert [s.score for s in other_rubric] == [0.5, 0.4, 0.5]


def test_server_errors_and_timeouts_are_retried(server):
    judge = RulerJudge(server.judge_model(timeout_s=0.3), retry=FAST_RETRY, cache_dir=None)
    server.script.extend(
        [
            Reply(status=503, content="overloaded"),
            Reply(content=scores_json(_1=0.5, _2=0.5), delay_s=1.0),  # arrives after the timeout
            Reply(content=scores_json(_1=0.3, _2=0.6)),
        ]
    )
    scores = run(judge.score_group([conversation("q", "a"), conversation("q", "b")], rubric="r"))
    assert [s.score for s in scores] == [0.3, 0.6]
    assert scores[0].metrics["ruler_attempts"] == 3
    assert len(server.requests) == 3


def test_an_answer_with_explanations_cut_at_its_cap_is_asked_again_for_the_scores_alone(server):
    """Asked again as it was, a judge that ran past its cap runs past it again; so RULER asks for the scores alone,
    whose answer fits a cap of a few tokens an answer."""
    judge = RulerJudge(server.judge_model(context_tokens=4096), retry=FAST_RETRY, cache_dir=None)
    cut = '{"scores": {"1": {"explanation": "The first answer is polite and'
    server.script.extend([Reply(content=cut, finish_reason="length"), Reply(content='{"scores": {"1": {"score": 0.7}, '
                                                                                 '"2": {"score": 0.2}}}')])  # fmt: skip
    scores = run(judge.score_group([conversation("q", "a"), conversation("q", "b")], rubric="r"))
    assert [s.score for s in scores] == [0.7, 0.2] and [s.explanation for s in scores] == ["", ""]
    first, second = server.requests
    explained = first["response_format"]["json_schema"]["schema"]["properties"]["scores"]["properties"]["1"]
    plain = second["response_format"]["json_schema"]["schema"]["properties"]["scores"]["properties"]["1"]
    assert "explanation" in explained["required"] and plain["required"] == ["score"]
    assert second["max_tokens"] < first["max_tokens"]  # sized for the scores alone
    assert [call.outcome for call in judge.calls] == ["cut", "ok"]


def test_gives_up_after_max_attempts_with_one_line_error(server):
    judge = RulerJudge(server.judge_model(), retry=FAST_RETRY, cache_dir=None)
    server.script.extend(Reply(content="not json at all") for _ in range(4))
    with pytest.raises(
        JudgeFailedError, match="failed 4 times; last failure: InvalidAnswer: the answer is not JSON"
    ) as info:
        run(judge.score_group([conversation("q", "a"), conversation("q", "b")], rubric="r"))
    assert "\n" not in str(info.value)
    assert len(server.requests) == 4


def test_a_judge_outage_shorter_than_outage_s_costs_time_not_the_group(server):
    """Connections refused (the judge's port is closed), then a storm of 429s, then an answer."""
    patient = RetryPolicy(outage_s=20, initial_backoff_s=0.1, max_backoff_s=0.5)
    judge = RulerJudge(server.judge_model(), retry=patient, cache_dir=None)
    group = [conversation("q", "a"), conversation("q", "b")]
    server.script.extend(
        [*(Reply(status=429, content="slow down") for _ in range(3)), Reply(content=scores_json(_1=1, _2=0))]
    )
    server.close_for(1.0)
    started = time.monotonic()
    scores = run(judge.score_group(group, rubric="r"))
    assert [s.score for s in scores] == [1.0, 0.0]
    assert scores[0].metrics["ruler_attempts"] >= 4  # 3 x 429, the answer (and the refused ones, if not
    assert len(server.requests) == 4 and time.monotonic() - started >= 1.0  # retried inside the client)

    server.close_for(30)  # down for longer than the budget: the group fails with one line
    short = RulerJudge(server.judge_model(), retry=RetryPolicy(outage_s=1, initial_backoff_s=0.2), cache_dir=None)
    with pytest.raises(JudgeFailedError, match=r"the judge could not answer for [01]s \(\d+ attempts, outage_s 1\)"):
        run(short.score_group(group, rubric="r"))


def test_client_errors_are_not_retried(server):
    judge = RulerJudge(server.judge_model(), retry=FAST_RETRY, cache_dir=None)
    server.script.append(Reply(status=401, content="bad key"))
    with pytest.raises(JudgeFailedError, match="will not be retried: AuthenticationError"):
        run(judge.score_group([conversation("q", "a"), conversation("q", "b")], rubric="r"))
    assert len(server.requests) == 1


def test_api_key_reaches_the_server_but_not_the_cache_or_logs(server, tmp_path, monkeypatch, caplog):
    secret = "sk-test-0123456789-secret"
    monkeypatch.setenv("RULER_TEST_KEY", secret)
    judge = RulerJudge(server.judge_model(api_key_env="RULER_TEST_KEY"), retry=FAST_RETRY, cache_dir=tmp_path)
    server.script.extend([Reply(status=429), Reply(content=scores_json(_1=1, _2=0))])
    with caplog.at_level(logging.DEBUG):
        run(judge.score_group([conversation("q", "a"), conversation("q", "b")], rubric="r"))
    assert server.headers[-1]["authorization"] == f"Bearer {secret}"
    cached = [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(cached) == 1 and secret not in cached[0]
    assert "retrying" in caplog.text and secret not in caplog.text


def test_the_same_model_name_on_another_server_is_not_answered_from_the_cache(server, tmp_path):
    """The cache keys on the judge's server (host and port) too: one server's judgments are not another's."""
    group = [conversation("q", "a"), conversation("q", "b")]
    with FakeJudgeServer() as other:
        server.script.append(Reply(content=scores_json(_1=1, _2=0)))
        other.script.append(Reply(content=scores_json(_1=0, _2=1)))
        first = run(ruler.ruler(group, server.judge_model(), cache_dir=tmp_path))
        second = run(ruler.ruler(group, other.judge_model(), cache_dir=tmp_path))
        again = run(ruler.ruler(group, server.judge_model(), cache_dir=tmp_path))  # its own, from the cache
    assert [s.score for s in first] == [1, 0] == [s.score for s in again] and [s.score for s in second] == [0, 1]
    assert len(server.requests) == 1 and len(other.requests) == 1


def test_without_api_key_env_no_provider_key_is_sent_to_an_endpoint(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-stay-home")
    server.script.append(Reply(content=scores_json(_1=1, _2=0)))
    run(ruler.ruler([conversation("q", "a"), conversation("q", "b")], server.judge_model(), cache_dir=None))
    assert server.headers[0]["authorization"] == "Bearer EMPTY"


def test_cache_off_asks_every_time(server):
    server.script.extend([Reply(content=scores_json(_1=1, _2=0)), Reply(content=scores_json(_1=0, _2=1))])
    group = [conversation("q", "a"), conversation("q", "b")]
    first = run(ruler.ruler(group, server.judge_model(), cache_dir=None))
    second = run(ruler.ruler(group, server.judge_model(), cache_dir=None))
    assert [s.score for s in first] == [1, 0] and [s.score for s in second] == [0, 1]
    assert len(server.requests) == 2


def test_ruler_score_group_rewards_logs_metrics_and_tools(server, tmp_path):
    tool = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
    group = TrajectoryGroup(
        [
            Trajectory(messages_and_choices=conversation("2+2?", "4"), tools=[tool], reward=0.25),
            Trajectory(messages_and_choices=conversation("2+2?", "22"), tools=[tool], reward=0.75),
        ],
        metadata={"input": 7},
    )
    server.script.append(Reply(content=scores_json(_1=0.95, _2=0.05)))
    scored = run(ruler.ruler_score_group(group, server.judge_model(), cache_dir=tmp_path))
    assert [t.reward for t in scored] == [0.95, 0.05]
    assert [t.metrics["independent_reward"] for t in scored] == [0.25, 0.75]
    assert [t.metrics["ruler_score"] for t in scored] == [0.95, 0.05]
    assert scored.trajectories[0].logs == ["RULER explanation: score 0.95"]
    assert scored.metadata == {"input": 7}
    assert [t.reward for t in group] == [0.25, 0.75]  # the input group is left as it was
    assert '"name": "calculator"' in server.requests[0]["messages"][1]["content"]  # the judge sees the tools


def test_ruler_score_group_swallows_a_failed_judge(server, caplog):
    server.script.extend(Reply(status=500) for _ in range(4))
    group = TrajectoryGroup([Trajectory(messages_and_choices=conversation("q", a)) for a in "ab"])
    with caplog.at_level(logging.WARNING, logger="ruler"):
        judge = RulerJudge(server.judge_model(), retry=FAST_RETRY, cache_dir=None)
        result = run(ruler.ruler_score_group(group, judge, swallow_exceptions=True))
    assert result is None
    assert "could not score a group of 2 trajectories" in caplog.text
    assert re.search(r"the judge could not answer for \ds \(\d+ attempts, outage_s 1.5\)", caplog.text)
    assert "InternalServerError" in caplog.text


def test_the_request_states_the_task_bounds_the_answer_and_fits_the_context(server):
    task = "Answer arithmetic questions for school children."
    judge = RulerJudge(server.judge_model(context_tokens=2048), retry=FAST_RETRY, cache_dir=None)
    server.script.append(Reply(content=scores_json(_1=1, _2=0)))
    long_answer = "Let me think about this step by step. " * 150
    scores = run(judge.score_group([conversation("2+2?", "4"), conversation("2+2?", long_answer)], task=task))
    body = server.requests[0]
    assert task in body["messages"][0]["content"] and task not in body["messages"][1]["content"]
    entry = body["response_format"]["json_schema"]["schema"]["properties"]["scores"]["properties"]["1"]
    assert entry["properties"]["explanation"]["maxLength"] == ruler.scores.EXPLANATION_MAX_CHARS
    assert body["max_tokens"] == ruler.scores.answer_tokens(2)
    assert "…[shortened " in body["messages"][1]["content"]
    assert [s.metrics["ruler_shortened"] for s in scores] == [0.0, 1.0]


def test_a_context_overflow_is_shortened_further_and_asked_once_more(server, tmp_path, caplog):
    judge = RulerJudge(server.judge_model(), retry=FAST_RETRY, cache_dir=tmp_path)  # context unknown: no fitting
    overflow = (
        "This model's maximum context length is 1024 tokens. However, your prompt contains 2100 input tokens, "
        "which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
    )
    server.script.extend([Reply(status=400, content=overflow), Reply(content=scores_json(_1=0.2, _2=0.9))])
    group = [conversation("2+2?", "It is 4. " * 400), conversation("2+2?", "4")]
    with caplog.at_level(logging.WARNING, logger="ruler"):
        scores = run(judge.score_group(group, rubric="r"))
    assert len(server.requests) == 2 and "overflowed the judge's context" in caplog.text
    retry_prompt = server.requests[1]["messages"]
    assert "…[shortened " in retry_prompt[1]["content"]
    assert "[shortened" not in server.requests[0]["messages"][1]["content"]
    assert ruler.prompt.estimate_prompt_tokens(retry_prompt) <= 1024 - server.requests[1]["max_tokens"]
    assert [s.score for s in scores] == [0.2, 0.9]
    assert [s.metrics["ruler_shortened"] for s in scores] == [1.0, 0.0] and scores[0].metrics["ruler_attempts"] == 2
    again = run(judge.score_group(group, rubric="r"))  # cached under the first prompt's key, with what was cut
    assert len(server.requests) == 2 and [s.metrics["ruler_shortened"] for s in again] == [1.0, 0.0]
