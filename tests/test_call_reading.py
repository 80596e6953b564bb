"""Reading a model turn's tool calls (autorl/agents/call_reading.py): what the server parsed, and each near miss
a small model writes that names one tool unambiguously, case by case; what is ambiguous is counted, never run."""

from __future__ import annotations

import copy
import json

import pytest

from autorl import Trajectory
from autorl.agents.call_reading import read_calls, resolve_name, summed_counts
from autorl.agents.rollout import turn_calls
from autorl.serving.embedded import TEMPLATES
from autorl.training.sequences import tokenize_trajectory
from tests.helpers.tiny import choice

TOOLS = ["lookup_extension", "convert"]
LOOKUP = {"name": "Ada Park"}


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def call_object(name: str = "lookup_extension", arguments: object = LOOKUP, key: str = "arguments") -> str:
    return json.dumps({"name": name, key: arguments})


@pytest.mark.parametrize(
    "text, where, repairs, content",
    [
        (block(call_object()), "block", (), None),  # left as text by a broken block beside it
        ("Sure! " + block(call_object()[:-1]), "block", (), "Sure!"),  # its last brace missing
        (block(call_object()) + "}", "block", (), "}"),  # a stray brace after it
        (f"I will call {call_object()} now.", "prose", (), "I will call  now."),
        (f"```json\n{call_object()}\n```", "prose", (), None),  # in a code fence
        (call_object(key="parameters"), "prose", (), None),
        (block(call_object("Lookup-Extension")), "block", ("name",), None),  # case and dash
        (block(call_object("lookup_extention")), "block", ("name",), None),  # misspelled
        (block(call_object(arguments=json.dumps(LOOKUP))), "block", ("string_arguments",), None),
        (call_object(key="args"), "prose", (), None),
        (json.dumps({"type": "function", "function": json.loads(call_object())}), "prose", (), None),  # OpenAI's
    ],
)
def test_a_call_the_server_missed_is_read_from_the_text(text, where, repairs, content):
    read = read_calls([], text, TOOLS)
    assert [(c.name, json.loads(c.arguments), c.where, c.repairs, c.id) for c in read.calls] == [
        ("lookup_extension", LOOKUP, where, repairs, None)
    ]
    assert read.content == content and read.invalid == []
    assert read.recovered and read.counts() == {
        "tool_calls_parsed": 0,
        "tool_calls_recovered": 1,
        "tool_calls_invalid": 0,
    }


def test_several_calls_in_one_turn_are_each_read_and_a_broken_one_is_counted():
    """vLLM's parser drops every call of a turn when one block is broken; each readable one is run here."""
    text = "\n".join([block(call_object()), block('{"name": "convert", "arguments": {"value": 1'), block("{oops")])
    read = read_calls([], text, TOOLS)
    assert [c.name for c in read.calls] == ["lookup_extension", "convert"]
    assert json.loads(read.calls[1].arguments) == {"value": 1}  # two closing braces short
    assert read.invalid == ["a <tool_call> block that is not a call object"]
    assert read.counts() == {"tool_calls_parsed": 0, "tool_calls_recovered": 2, "tool_calls_invalid": 1}


@pytest.mark.parametrize(
    "text, invalid",
    [
        (block(call_object("search")), ["no one tool named 'search'"]),  # no tool of that name
        (block("lookup_extension Ada Park"), ["a <tool_call> block that is not a call object"]),
        ("lookup_extension(name='Ada Park')", ["a Python-style call of 'lookup_extension'"]),
        ("The extension is 1234.", []),  # no call at all
        ('Here is a record: {"name": "Ada Park", "extension": 1234}', []),  # an object that is not a call
        (block(json.dumps({"name": "lookup_extension"})), ["a <tool_call> block that is not a call object"]),
    ],
)
def test_what_is_not_one_tool_s_call_is_counted_invalid_or_ignored_and_never_run(text, invalid):
    read = read_calls([], text, TOOLS)
    assert read.calls == [] and read.invalid == invalid and read.content == text and not read.recovered


def test_a_name_close_to_two_tools_is_not_guessed():
    tools = ["get_user", "get_users"]
    assert resolve_name("get_user", tools) == "get_user"  # exact wins
    assert resolve_name("get_usr", tools) is None  # as close to both
    assert resolve_name("GET-USERS", tools) == "get_users"
    assert read_calls([], block(call_object("get_usr")), tools).invalid == ["no one tool named 'get_usr'"]
    twins = ["get-user", "get_user"]  # one name up to case and dashes
    assert resolve_name("get-user", twins) == "get-user" and resolve_name("GET USER", twins) is None
    assert resolve_name("get_usr", twins) is None


def test_a_block_left_open_before_another_does_not_swallow_it_and_prose_in_parentheses_is_no_call():
    text = "<tool_call>\n" + call_object()[:-1] + "\n" + block(call_object("convert", {"value": 1}))
    assert [c.name for c in read_calls([], text, TOOLS).calls] == ["lookup_extension", "convert"]
    read = read_calls([], "Let us play (as X) now.", ["play"])
    assert read.calls == [] and read.invalid == []


def test_calls_the_server_parsed_are_run_as_read_with_their_names_and_arguments_repaired():
    server = [
        ("a", "lookup_extension", json.dumps(LOOKUP)),
        ("b", "lookup_extention", json.dumps(LOOKUP)),  # misspelled
        ("c", "convert", json.dumps(json.dumps({"value": 1}))),  # arguments as a JSON string
        ("d", "search", "{}"),  # no such tool: run for its error text, counted invalid
    ]
    read = read_calls(server, "thinking", TOOLS)
    assert [(c.id, c.name, c.repairs, c.known) for c in read.calls] == [
        ("a", "lookup_extension", (), True),
        ("b", "lookup_extension", ("name",), True),
        ("c", "convert", ("string_arguments",), True),
        ("d", "search", (), False),
    ]
    assert json.loads(read.calls[2].arguments) == {"value": 1} and read.content == "thinking"
    assert read.counts() == {"tool_calls_parsed": 1, "tool_calls_recovered": 2, "tool_calls_invalid": 1}


def test_a_clean_parsed_call_is_not_a_recovery():
    read = read_calls([("a", "convert", '{"value": 1}')], None, TOOLS)
    assert not read.recovered and read.counts()["tool_calls_parsed"] == 1


def test_a_step_s_counts_are_summed_over_its_rollouts_and_absent_without_tools():
    rollouts = [{"turns": 1, "tool_calls_parsed": 1, "tool_calls_recovered": 2, "tool_calls_invalid": 0}] * 3
    assert summed_counts(rollouts) == {"tool_calls_parsed": 3, "tool_calls_recovered": 6, "tool_calls_invalid": 0}
    assert summed_counts([{"turns": 1}]) == {}


def test_a_turn_whose_call_was_read_from_its_prose_trains_its_sampled_tokens(tokenizer):
    """The Choice rewritten by `turn_calls` (its call shown as a call) still trains exactly the tokens the policy
    sampled (the prose with the JSON), and the conversation after it renders through the embedded template."""
    tokenizer = copy.copy(tokenizer)
    tokenizer.chat_template = (TEMPLATES / "smollm2_tools.jinja").read_text()
    text = f"I will look it up: {call_object()}"
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    asked = choice(text, ids)
    read = turn_calls(asked, TOOLS, 1)
    assert read.recovered and asked.message.tool_calls[0].id == "call_1_0"
    answer_ids = [*tokenizer.encode("1234", add_special_tokens=False), tokenizer.eos_token_id]
    conversation = [
        {"role": "system", "content": "Answer."},
        {"role": "user", "content": "Ada Park?"},
        asked,
        {"role": "tool", "tool_call_id": "call_1_0", "content": "Ada Park: extension 1234"},
        choice("1234", answer_ids),
    ]
    tools = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in TOOLS]
    sequence = tokenize_trajectory(Trajectory(messages_and_choices=conversation, tools=tools), tokenizer)
    assert [t for t, m in zip(sequence.input_ids, sequence.mask, strict=True) if m] == ids + answer_ids
