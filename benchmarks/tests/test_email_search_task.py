"""The learning benchmark's two-call task (benchmarks/perf/learning_tasks/email_search.toml): the example's email
agent (examples/email_search.toml) from its task text alone, judged by the example's judge, run by learning.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import learning

from autorl.agents.tools import Toolbox
from autorl.task import load_task
from benchmarks.perf.learning_tasks import judges
from examples.email_search import FACTS, score

ROOT = Path(__file__).resolve().parents[2]


def test_the_task_is_the_example_without_its_system_prompt_and_learning_py_runs_it():
    task, example = load_task(learning.task_file("email_search")), load_task(ROOT / "examples" / "email_search.toml")
    assert learning.task_file("email_search").parent.name == "learning_tasks" and "email_search" in learning.TOOL_TASKS
    assert task.system_prompt is None and example.system_prompt is not None
    assert (task.description, task.max_turns) == (example.description, example.max_turns)
    assert task.inputs_file.resolve() == example.inputs_file.resolve()
    tools = [[(t.name, Path(t.function.rsplit(":", 1)[0]).resolve()) for t in spec.tools] for spec in (task, example)]
    assert tools[0] == tools[1] and [name for name, _ in tools[0]] == ["search_emails", "read_email"]
    assert judges.email_search is score and learning.judge_spec("email_search").endswith("judges:email_search")


def test_the_task_s_tools_answer_through_the_toolbox():
    fact = FACTS[0]

    async def calls() -> tuple[str, str]:
        async with await Toolbox.open(load_task(learning.task_file("email_search"))) as toolbox:
            found = await toolbox.call("search_emails", {"query": fact.question})
            read = await toolbox.call("read_email", {"message_id": fact.message_id})
            return found.text, read.text

    found, read = asyncio.run(calls())
    assert f"message_id: {fact.message_id} " in found and fact.answer in read
