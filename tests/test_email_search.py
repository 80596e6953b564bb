"""The two-call task in ART•E's shape (examples/email_search.py): a synthetic mailbox in SQLite with FTS5, the
tools `search_emails` and `read_email` through the agent's toolbox, and a judge that scores each turn, its turn
scores reaching the trainer's per-turn advantages. Real tools and SQLite throughout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from openai.types.chat.chat_completion import Choice

import ruler
from autorl import TrainConfig, Trajectory, TrajectoryGroup
from autorl.agents.tools import Toolbox
from autorl.task import load_task
from autorl.training.sequences import tokenize_trajectory
from autorl.training.turn_credit import TURN_REWARDS, credit_turns
from examples import email_search
from examples.email_search import EMAILS, FACTS, TurnScores, read_email, score, search_emails

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "email_search.toml"
FACT = FACTS[0]


def test_the_mailbox_is_generated_the_same_and_each_answer_is_in_one_body_only():
    assert len(EMAILS) == 80 and len(FACTS) == 40
    assert [f.question for f in FACTS] == [
        json.loads(line)["input"] for line in EXAMPLE.with_name("email_search.jsonl").read_text().splitlines()
    ]
    assert email_search._generate() == (EMAILS, FACTS)  # deterministic from SEED
    for fact in FACTS:
        (holder,) = [e for e in EMAILS if fact.answer in e.body]
        assert holder.message_id == fact.message_id and fact.answer not in holder.subject + fact.question


def test_searching_lists_ids_and_subjects_but_never_the_answer_and_reading_shows_it():
    listed = search_emails(FACT.question)
    assert f"message_id: {FACT.message_id} " in listed and FACT.answer not in listed
    assert len(listed.splitlines()) <= email_search.RESULTS
    assert all(f"message_id: {f.message_id} " in search_emails(f.question) for f in FACTS)  # the question finds it
    assert search_emails("zebra quokka") == "no messages match 'zebra quokka'"
    assert search_emails('"offsite" OR (').startswith("message_id:")  # FTS syntax in a query is only words
    text = read_email(FACT.message_id)
    assert text.startswith(f"message_id: {FACT.message_id}\n") and FACT.answer in text
    assert read_email(FACT.message_id.upper().replace("-0", "-")) == text  # MSG-12 for msg-012
    with pytest.raises(ValueError, match="no message with id 'msg-999'"):
        read_email("msg-999")


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def rollout(query: str, message_id: str, reply: str) -> list[dict]:
    """A conversation of the task, its tool results from the example's real tools through the agent's toolbox."""

    async def results() -> tuple[str, str]:
        async with await Toolbox.open(load_task(EXAMPLE)) as toolbox:
            found = await toolbox.call("search_emails", json.dumps({"query": query}))
            read = await toolbox.call("read_email", json.dumps({"message_id": message_id}))
            return found.text, read.text

    found, read = asyncio.run(results())
    return [
        {"role": "system", "content": "task"},
        {"role": "user", "content": FACT.question},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "search_emails", {"query": query})]},
        {"role": "tool", "tool_call_id": "c1", "content": found},
        {"role": "assistant", "content": "", "tool_calls": [call("c2", "read_email", {"message_id": message_id})]},
        {"role": "tool", "tool_call_id": "c2", "content": read},
        {"role": "assistant", "content": reply},
    ]


def test_the_task_offers_both_tools_with_their_schemas():
    async def offered() -> dict:
        async with await Toolbox.open(load_task(EXAMPLE)) as toolbox:
            refused = await toolbox.call("read_email", '{"message_id": "nope"}')
            assert refused.text.startswith("error:") and "no message with id 'nope'" in refused.text
            return {t["function"]["name"]: t["function"]["parameters"]["required"] for t in toolbox.openai_tools()}

    assert asyncio.run(offered()) == {"search_emails": ["query"], "read_email": ["message_id"]}


@pytest.mark.parametrize(
    ("query", "message_id", "reply", "expected"),
    [
        (FACT.question, FACT.message_id, f"It is {FACT.answer}.", TurnScores(1.0, [0.25, 0.25, 1.0])),
        (FACT.question, FACT.message_id, "I could not tell.", TurnScores(0.5, [0.25, 0.25, 0.0])),
        (FACT.question, "msg-999", "No idea.", TurnScores(0.25, [0.25, 0.0, 0.0])),  # the read failed
        ("zebra", FACT.message_id, "Hmm.", TurnScores(0.25, [0.0, 0.25, 0.0])),  # read without finding it
        ("zebra", "msg-999", FACT.answer, TurnScores(1.0, [0.0, 0.0, 1.0])),  # right: it cannot be guessed
    ],
)
def test_the_judge_credits_the_search_the_read_and_the_answer_turn_by_turn(query, message_id, reply, expected):
    assert score(rollout(query, message_id, reply)) == expected


def test_a_call_as_last_turn_or_an_unknown_question_earns_no_answer_credit():
    last_call = rollout(FACT.question, FACT.message_id, "")[:-1]
    assert score(last_call) == TurnScores(0.5, [0.25, 0.25])
    other = [{"role": "user", "content": "What is the weather?"}, {"role": "assistant", "content": FACT.answer}]
    assert score(other) == TurnScores(0.0, [0.0])


def test_the_judges_turn_scores_become_per_turn_advantages(tokenizer):
    """The judge through ruler_score_group leaves turn rewards on each trajectory; the trainer's credit then ranks
    the turns: the first turns (one state: the question) by their returns, the last by their rewards."""

    def trajectory(query: str, message_id: str, reply: str) -> Trajectory:
        messages = rollout(query, message_id, reply)
        items = [
            Choice.model_validate({"index": 0, "finish_reason": "stop", "message": m})
            if m["role"] == "assistant"
            else m
            for m in messages
        ]
        return Trajectory(messages_and_choices=items)

    group = TrajectoryGroup([
        trajectory(FACT.question, FACT.message_id, FACT.answer),
        trajectory(FACT.question, FACT.message_id, "No idea."),
        trajectory("zebra", "msg-999", "No idea."),
    ])  # fmt: skip
    scored = asyncio.run(ruler.ruler_score_group(group, ruler.FunctionJudge(score)))
    assert [t.reward for t in scored.trajectories] == [1.0, 0.5, 0.0]
    assert [t.metadata[TURN_REWARDS] for t in scored.trajectories] == [[0.25, 0.25, 1.0], [0.25, 0.25, 0.0], [0.0] * 3]
    sequences = [[tokenize_trajectory(t, tokenizer)] for t in scored.trajectories]
    credit_turns(scored, sequences, [1.2, 0.0, -1.2], TrainConfig(turn_advantage_grouping="turn"))
    per_turn = [{t: a for t, a, m in zip(s.turns, s.advantages, s.mask, strict=True) if m} for (s,) in sequences]
    assert per_turn[0][2] > per_turn[1][2] > per_turn[2][2]  # the right answer, above the others
    assert per_turn[0][0] > per_turn[1][0] > per_turn[2][0]  # the search that led to it
