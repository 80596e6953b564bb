"""The judge audit (`ruler.audit_judge`) and the inputs check against scripted RULER judges over real HTTP.

Each scripted judge is a chat-completions server on 127.0.0.1 that reads the RULER prompt it is sent (the
trajectories under their ids) and answers with scores: by what each answer says (a consistent judge), by
the answer's position in the prompt, or at random. The audit must tell them apart; a program judge must
come out exactly consistent; and a second audit of the same groups must be answered from the cache.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

import ruler
from ruler import FunctionJudge, JudgeModel, RulerJudge
from ruler.audit import reads_rubric
from tests.helpers.chat_server import ChatCompletionServer
from tests.helpers.judge_server import answers_in, by_content, judge_completion

QUESTIONS = ["How do bees make honey?", "Why is the sky blue?", "What is a prime number?", "How do tides work?"]
ANSWERS = ["Yes.", "It depends on the light.", "Sunlight scatters off air molecules.", "Blue light scatters most.",
           "No idea.", "Because of the sea.", "Air molecules scatter blue light more than red.", "Rayleigh."]  # fmt: skip


def groups() -> list[list[list[dict]]]:
    """Groups of four distinct answers to one question each."""
    return [
        [
            [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": question},
                {"role": "assistant", "content": f"{answer} ({number})"},
            ]
            for answer in ANSWERS
        ]
        for number, question in enumerate(QUESTIONS)
    ]


def by_position(request: dict) -> dict:
    """A judge that scores the first trajectory highest and the last lowest, whatever they say."""
    ids = list(answers_in(request))
    return judge_completion({tid: 1 - i / (len(ids) - 1) for i, tid in enumerate(ids)})


def at_random(request: dict) -> dict:
    """A judge that guesses (seeded by the prompt, so that the test does not depend on the requests' order)."""
    rng = random.Random(json.dumps(request["messages"]))
    return judge_completion({tid: round(rng.random(), 3) for tid in answers_in(request)})


def audited(answer, tmp_path, scores=None, server=None) -> tuple[ruler.JudgeAudit, ChatCompletionServer]:
    """The audit of a judge on `server` (left running), or on a new one answering with `answer` (closed)."""
    given = server is not None
    server = server or ChatCompletionServer(answer)
    server.requests.clear()
    try:
        judge = RulerJudge(JudgeModel(model="scripted", base_url=server.base_url), cache_dir=tmp_path / "cache")
        audit = asyncio.run(ruler.audit_judge(judge, groups(), rubric=ruler.DEFAULT_RUBRIC, task="t", scores=scores))
    finally:
        if not given:
            server.close()
    return audit, server


def test_a_judge_that_scores_what_answers_say_is_reliable(tmp_path):
    audit, server = audited(by_content, tmp_path)
    assert audit.verdict == "reliable", audit.line()
    assert audit.rejudge_gap == 0 and audit.duplicate_gap == 0 and audit.reliability == 1.0
    assert audit.rank_agreement == 1.0 and audit.position_effect == 0 and audit.answer_spread > 0.1
    # settled on the first round: its 3 groups of 4 agree, the fourth is not asked about
    assert audit.offered == 4 and audit.groups == 3 and audit.answers == 24 and audit.failed == 0
    # three requests per group (as given, reversed, with a copy), each another prompt
    assert len(server.requests) == 9 == audit.attempts
    assert len({json.dumps(r["messages"]) for r in server.requests}) == 9
    shown = [list(answers_in(r).values()) for r in server.requests]
    assert [f"{a} (0)" for a in reversed(ANSWERS)] in shown  # reversed
    assert [*(f"{a} (0)" for a in ANSWERS), f"{ANSWERS[0]} (0) "] in shown  # the first answer again, last
    assert audit.line().startswith("judge reliable: asked again with the answers in reverse order")


def test_a_judge_that_scores_by_position_is_noise_and_says_why(tmp_path):
    audit, _ = audited(by_position, tmp_path)
    assert audit.verdict == "noise", audit.line()
    assert audit.position_effect == pytest.approx(-1.0)  # first slot 1, last slot 0
    assert audit.rank_agreement == pytest.approx(-1.0) and audit.reliability < 0
    assert audit.duplicate_gap == pytest.approx(1.0)  # the first answer and its copy in the last slot
    assert "follow the answers' positions in the prompt" in audit.line()


def test_the_audit_asks_about_every_group_while_its_groups_disagree(tmp_path):
    """A judge consistent on two questions and ranking by position on the others: after the first round (two
    consistent groups, one by position) resamples of it disagree, so the fourth group is asked about too."""

    def mixed(request: dict) -> dict:
        text = json.dumps(request["messages"])
        return by_content(request) if any(q in text for q in QUESTIONS[:2]) else by_position(request)

    audit, _ = audited(mixed, tmp_path)
    assert audit.offered == audit.groups == 4 and audit.attempts == 12
    assert audit.verdict != "reliable", audit.line()


def test_a_judge_that_scores_at_random_is_noise(tmp_path):
    audit, _ = audited(at_random, tmp_path)
    assert audit.verdict == "noise", audit.line()
    assert audit.reliability < 0.3 and audit.rejudge_gap > 0.15
    assert "about as much as answers differ" in audit.line()


def test_given_scores_save_a_request_per_group_and_a_rerun_is_answered_from_the_cache(tmp_path):
    scores = [[min(1.0, len(m[-1]["content"]) / 40) for m in group] for group in groups()]
    server = ChatCompletionServer(by_content)
    try:
        first, _ = audited(by_content, tmp_path, scores=scores, server=server)
        assert first.verdict == "reliable" and len(server.requests) == 6 == first.attempts  # two per group, 3 groups
        # the same judge (its cache is keyed on its address) asked again: every answer from the cache
        again, _ = audited(by_content, tmp_path, scores=scores, server=server)
        assert server.requests == [] and again.attempts == 0
    finally:
        server.close()
    assert again == first.__class__(**{**first.as_dict(), "attempts": 0})


def test_a_program_judge_is_exactly_consistent():
    judge = FunctionJudge(lambda messages: len(messages[-1]["content"].strip()) / 40)
    audit = asyncio.run(ruler.audit_judge(judge, groups()))
    assert audit.verdict == "reliable" and audit.rejudge_gap == 0 and audit.duplicate_gap == 0
    assert audit.reliability == 1.0 and audit.attempts == 0
    constant = asyncio.run(ruler.audit_judge(FunctionJudge(lambda messages: 0.0), groups()))
    assert constant.verdict == "uninformative" and constant.reliability is None  # every answer scored 0
    assert "cannot tell whether it ranks" in constant.line()


def test_the_inputs_check_asks_once_which_inputs_fit_the_task(tmp_path):
    def on_topic(request: dict) -> dict:
        assert "generated for the task" in request["messages"][0]["content"]  # the inputs check's rubric
        return judge_completion({tid: float("refund" in text) for tid, text in answers_in(request).items()})

    server = ChatCompletionServer(on_topic)
    try:
        judge = RulerJudge(JudgeModel(model="scripted", base_url=server.base_url), cache_dir=tmp_path)
        assert reads_rubric(judge) and not reads_rubric(FunctionJudge(len))
        inputs = ["I want a refund for my order", "Savory food", "Can I get a refund on shoes?"]
        check = asyncio.run(ruler.check_inputs(judge, inputs, task="Reply to refund requests"))
    finally:
        server.close()
    assert len(server.requests) == 1 and check.attempts == 1
    assert (check.checked, check.on_task, check.off_task) == (3, 2, ["Savory food"])
