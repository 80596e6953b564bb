"""An email agent in the shape of ART•E (OpenPipe ART's email-search agent), on a small synthetic local mailbox.

The mailbox is generated here, deterministically from `SEED` (no download): made-up colleagues write about
offsites, invoices, reviews and bookings, each with one fact in its body (a door code, an amount, a room, a
confirmation code), beside messages on the same subjects that lack it. It lives in an in-memory SQLite database
with an FTS5 index. The agent has two tools: `search_emails(query)` lists matching messages (id, date, sender,
subject: never the body) and `read_email(message_id)` shows one. Each question of `email_search.jsonl` names a
fact that only a message's body holds: the agent must search, read the message found, then answer.

`score` is the judge (`--judge examples/email_search.py:score`): it knows each question's message and fact and
scores turns as well as the whole (`ruler.TurnScores`: credit per turn, docs/training.md).

    python examples/email_search.py    # writes email_search.jsonl again from the generated mailbox
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruler import TurnScores

SEED = "autorl-mailbox-1"
"""What the mailbox is drawn from: another seed, another mailbox."""
PEOPLE = (
    "Ada Park", "Bruno Vela", "Carmen Holt", "Dario Finch", "Elena Marsh", "Farid Osei", "Greta Lund",
    "Hugo Brandt", "Ines Castillo", "Jonas Weber", "Kira Novak", "Luca Ferri",
)  # fmt: skip
CITIES = ("Lisbon", "Oslo", "Tallinn", "Porto", "Krakow", "Ghent", "Bergen", "Lyon", "Turin", "Graz")
SUPPLIERS = (
    "Brightwater Supplies", "Norland Paper", "Kestrel Logistics", "Amberline Catering", "Tidewell Print",
    "Copperfield Tools", "Marisol Foods", "Northgate Cleaning", "Pinecrest Travel", "Greyfield Office",
)  # fmt: skip
PROJECTS = ("Orion", "Juniper", "Halcyon", "Tamarack", "Saffron", "Meridian", "Bluebell", "Quasar", "Falcon", "Cobalt")
SEARCH_CREDIT = 0.25
"""A turn whose search lists the question's message (the first such turn)."""
READ_CREDIT = 0.25
"""A turn that reads the question's message (the first such turn)."""
ANSWER_CREDIT = 1.0
"""The last turn, when it states the fact asked for."""
RESULTS = 5
"""Messages a search lists at most (best first, by FTS5's bm25 rank)."""


@dataclass(frozen=True)
class Email:
    message_id: str
    date: str
    sender: str
    subject: str
    body: str


@dataclass(frozen=True)
class Fact:
    """A question, the message whose body answers it, and the answer."""

    question: str
    message_id: str
    answer: str


TOPICS = (
    (CITIES, "door",
     ("{x} offsite: building access", "Hi all, the door code for the {x} office during the offsite is {v}. Please do not "
      "share it outside the team.", "What is the door code for the {x} offsite?"),
     ("{x} offsite: agenda draft", "Here is the first agenda for the {x} offsite: talks in the morning, a walk after "
      "lunch. Comments welcome.")),
    (SUPPLIERS, "amount",
     ("Invoice {x}", "Please find invoice {x} attached. The total due is {v} EUR, payable within 30 days.",
      "How much is due on invoice {x}?"),
     ("Payment terms for invoice {x}", "A reminder that invoice {x} keeps our usual terms; the amount is in the "
      "invoice itself.")),
    (PROJECTS, "room",
     ("{x} review: room booked", "The {x} review is booked in room {v} on Thursday at 10. Bring the latest numbers.",
      "Which room is the {x} review in?"),
     ("{x} review: slides", "Could everyone send their slides for the {x} review by Wednesday?")),
    ((*CITIES[:5], "Vienna", "Riga", "Seville", "Dublin", "Basel"), "booking",
     ("Booking confirmed: {x} trip", "Your train and hotel for the {x} trip are booked. Your confirmation number is {v}.",
      "What is the confirmation number of my {x} trip booking?"),
     ("{x} trip: travel policy", "Before the {x} trip, please read the travel policy on the intranet.")),
)  # fmt: skip
"""Per kind of fact: its subjects, what its value is, the message that holds it (subject, body, question) and a
message on the same subject without it."""


def _value(kind: str, rng: random.Random) -> str:
    if kind == "door":
        return str(rng.randrange(1000, 10000))
    if kind == "amount":
        return f"{rng.randrange(200, 9000)}.{rng.randrange(0, 100):02d}"
    if kind == "room":
        return f"{rng.choice('ABCDE')}-{rng.randrange(100, 500)}"
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))


def _generate() -> tuple[list[Email], list[Fact]]:
    rng = random.Random(SEED)
    drafts: list[tuple[str, str, str | None, str | None]] = []  # subject, body, question, answer
    for subjects, kind, (subject, body, question), (other_subject, other_body) in TOPICS:
        for x in subjects:
            x = (
                f"{4100 + 53 * subjects.index(x) + rng.randrange(50)} from {x}" if kind == "amount" else x
            )  # unique numbers
            value = _value(kind, rng)
            drafts.append((subject.format(x=x), body.format(x=x, v=value), question.format(x=x), value))
            drafts.append((other_subject.format(x=x), other_body.format(x=x), None, None))
    rng.shuffle(drafts)
    emails, facts = [], []
    for index, (subject, body, question, answer) in enumerate(drafts, start=1):
        sender = rng.choice(PEOPLE)
        message_id = f"msg-{index:03d}"
        date = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        address = f"{sender} <{sender.lower().replace(' ', '.')}@example.com>"
        emails.append(Email(message_id, date, address, subject, body))
        if question is not None and answer is not None:
            facts.append(Fact(question, message_id, answer))
    return emails, facts


EMAILS, FACTS = _generate()
"""The mailbox's messages, and the questions that one message each answers."""
_BY_QUESTION = {" ".join(f.question.split()).casefold(): f for f in FACTS}
_LOCK = threading.Lock()  # tools run in threads: one connection, one query at a time
_DATABASE: sqlite3.Connection | None = None


def mailbox() -> sqlite3.Connection:
    """The mailbox as an in-memory SQLite database with an FTS5 index of sender, subject and body (built once)."""
    global _DATABASE
    if _DATABASE is None:
        database = sqlite3.connect(":memory:", check_same_thread=False)
        database.execute(
            "CREATE VIRTUAL TABLE emails USING fts5(message_id UNINDEXED, date UNINDEXED, sender, subject, body)"
        )
        database.executemany("INSERT INTO emails VALUES (?, ?, ?, ?, ?)", [
            (e.message_id, e.date, e.sender, e.subject, e.body) for e in EMAILS
        ])  # fmt: skip
        _DATABASE = database
    return _DATABASE


def search_emails(query: str) -> str:
    """Search the mailbox by keywords. Lists up to 5 matching messages, best first, each with its message_id,
    date, sender and subject; read one with read_email to see its text.

    Args:
        query: Keywords to look for in the messages, e.g. 'Lisbon offsite'.
    """
    words = re.findall(r"\w+", query)
    if not words:
        raise ValueError("the query has no words to search for")
    match = " OR ".join(f'"{word}"' for word in words)
    with _LOCK:
        rows = (
            mailbox()
            .execute(
                "SELECT message_id, date, sender, subject FROM emails WHERE emails MATCH ? ORDER BY rank LIMIT ?",
                (match, RESULTS),
            )
            .fetchall()
        )
    if not rows:
        return f"no messages match {query!r}"
    return "\n".join(f"message_id: {i} | date: {d} | from: {s} | subject: {t}" for i, d, s, t in rows)


def read_email(message_id: str) -> str:
    """Read one message of the mailbox: its sender, date, subject and text.

    Args:
        message_id: The message's id as search_emails lists it, e.g. 'msg-007'.
    """
    wanted = _message_id(message_id)
    with _LOCK:
        row = (
            mailbox()
            .execute("SELECT message_id, date, sender, subject, body FROM emails WHERE message_id = ?", (wanted,))
            .fetchone()
        )
    if row is None:
        raise ValueError(f"no message with id {message_id!r}; search_emails lists the ids")
    return "message_id: {}\ndate: {}\nfrom: {}\nsubject: {}\n\n{}".format(*row)


def _message_id(text: str) -> str:
    """`msg-NNN` from an id as a model may write it ('msg-7', 'MSG-007', '7')."""
    digits = re.fullmatch(r"\s*(?:msg[-_ ]?)?0*(\d{1,3})\s*", str(text), re.IGNORECASE)
    return f"msg-{int(digits.group(1)):03d}" if digits else str(text).strip()


def fact_of(question: str) -> Fact | None:
    """The fact a question of `email_search.jsonl` asks for (spacing and case aside), None for another text."""
    return _BY_QUESTION.get(" ".join(question.split()).casefold())


def states(reply: str, answer: str) -> bool:
    """Whether a reply states `answer` (case, spaces and thousands commas aside) and, for a number, no other
    number of its length."""
    flat = re.sub(r"[\s,]", "", reply).casefold()
    if answer.casefold() not in flat:
        return False
    if answer.isdigit():
        return re.findall(rf"(?<!\d)\d{{{len(answer)}}}(?!\d)", reply) == [answer]
    return True


def score(messages: list[dict[str, Any]]) -> TurnScores:
    """The judge, per turn and in all. Per assistant message: `SEARCH_CREDIT` to the first whose search_emails
    call listed the question's message, `READ_CREDIT` to the first whose read_email call showed it,
    `ANSWER_CREDIT` to the last when it calls no tool and states the answer (`states`). The trajectory's score: 1
    for the answer, else the search's and the read's credit (at most 0.5). 0 everywhere for a question not in
    the inputs."""
    replies = [m for m in messages if m.get("role") == "assistant"]
    turns = [0.0] * len(replies)
    question = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
    fact = fact_of(question)
    if fact is None:
        return TurnScores(0.0, turns)
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    found = read = False
    for index, reply in enumerate(replies):
        for call in reply.get("tool_calls") or []:
            name, result = (call.get("function") or {}).get("name"), results.get(call.get("id"), "")
            if name == "search_emails" and not found and f"message_id: {fact.message_id} " in result:
                found, turns[index] = True, turns[index] + SEARCH_CREDIT
            if name == "read_email" and not read and result.startswith(f"message_id: {fact.message_id}\n"):
                read, turns[index] = True, turns[index] + READ_CREDIT
    last = replies[-1] if replies else {}
    if replies and not last.get("tool_calls") and states(str(last.get("content") or ""), fact.answer):
        turns[-1] += ANSWER_CREDIT
        return TurnScores(1.0, turns)
    return TurnScores(SEARCH_CREDIT * found + READ_CREDIT * read, turns)


def inputs() -> list[dict[str, str]]:
    """The questions, one per fact, in the mailbox's order, two of every five held out for validation (24
    training and 16 validation questions)."""
    return [{"input": f.question, "split": "val" if i % 5 in (1, 3) else "train"} for i, f in enumerate(FACTS)]


if __name__ == "__main__":
    path = Path(__file__).with_name("email_search.jsonl")
    path.write_text("".join(json.dumps(row) + "\n" for row in inputs()))
    print(f"{path}: {len(FACTS)} questions over {len(EMAILS)} messages")
