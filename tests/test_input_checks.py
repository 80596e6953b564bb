"""The junk checks on generated inputs and system prompts (autorl.inputs.checks)."""

from __future__ import annotations

import pytest

from autorl.inputs.checks import junk_reason, system_prompt_problem
from autorl.inputs.generation import input_request
from autorl.task import TaskSpec

MATH = TaskSpec(
    description="Solve grade-school math word problems. Think step by step, then end with 'Answer: <number>'.",
    generator_instructions="Write self-contained word problems with exactly one numeric answer.",
)
SUPPORT = TaskSpec(
    description="You triage customer-support emails for an online electronics shop. Reply with one JSON object.",
    generator_instructions="Write realistic customer emails, from one line to a few paragraphs, some polite, some angry.",
)
UNITS = TaskSpec(description="Answer questions about converting quantities between units with the `convert` tool.")
FRENCH = TaskSpec(description="Translate short English sentences into French; reply with the translation only.")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # What the embedded 135M generator wrote as "inputs".
        *[(f"example {i}", "template echo") for i in range(1, 6)],
        ("examples", "template echo"),
        ("new_input6", "template echo"),
        ("guidance", "single identifier"),
        ("customers_requested_urgent_requests", "single identifier"),
        # Other placeholders.
        ("input 3", "template echo"),
        ("Example 2:", "template echo"),
        ("<input>", "template echo"),
        ("{input}", "template echo"),
        ("[user message]", "template echo"),
        ("...", "template echo"),
        ("[[ ## new_inputs ## ]]", "template echo"),
        ("snake_case_words", "single identifier"),
        ("camelCase", "single identifier"),
        ("Hello!", "single identifier"),
        ("2 + 2 = ?", "too few words"),
        ("ok 1234 5678", "too few words"),
    ],
)
def test_placeholders_are_junk(text, reason):
    assert junk_reason(text, SUPPORT) == reason


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ("You triage customer-support emails for an online electronics shop.", SUPPORT),
        ("Write realistic customer emails, from one line to a few paragraphs, some polite, some angry.", SUPPORT),
        ("Write realistic customer emails, from one line to a few paragraphs", SUPPORT),
        (SUPPORT.description, SUPPORT),
        ("solve grade-school math word problems", MATH),
        ("Write self-contained word problems with exactly one numeric answer", MATH),
    ],
)
def test_copies_of_the_task_instructions_are_junk(text, task):
    assert junk_reason(text, task) == "copy of the instructions"


def test_copies_of_extra_instructions_are_junk():
    system_prompt = "You are a careful math tutor who explains each step briefly."
    assert junk_reason("You are a careful math tutor who explains each step.", MATH, [system_prompt]) == (
        "copy of the instructions"
    )
    request = input_request(MATH, "hard")
    last_sentence = request.splitlines()[-1]
    assert junk_reason(last_sentence, MATH, [request]) == "copy of the instructions"
    assert junk_reason("You are a careful math tutor who explains each step.", MATH) is None


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ("Convert 5 km to miles", UNITS),
        ("How many pounds is 3 kilograms?", UNITS),
        ("What is 2+2?", MATH),
        ("hey can u send the report", SUPPORT),
        ("my order never arrived, where is it??", SUPPORT),
        ("Hi, I was charged twice for order #88213. Please refund one of the charges.", SUPPORT),
        ("Maya buys 3 notebooks at $2.50 each and pays with a $10 bill. How much change does she get?", MATH),
        ("Solve this word problem: Tom has 3 apples and buys 5 more. How many does he have?", MATH),
        ("Translate this short English sentence into French: I like cats.", FRENCH),
        ("Example 1: a train travels 120 km in 2 hours. What is its speed?", MATH),
        ("Can you help me with my email account? I can't log in since yesterday.", SUPPORT),
        ("(no subject) the charger is broken", SUPPORT),
    ],
)
def test_real_inputs_pass(text, task):
    assert junk_reason(text, task, [input_request(task)]) is None


GOOD_PROMPT = (
    "You solve grade-school math word problems. Think step by step in a few short sentences, "
    "then end your reply with a final line 'Answer: <number>'."
)


@pytest.mark.parametrize(
    "prompt",
    [
        GOOD_PROMPT,
        "You solve math problems and end with 'Answer: <number>'.",
        "Solve each word problem carefully.\n\nFormat:\n- reasoning\n- Answer: <number>",
    ],
)
def test_good_system_prompts_pass(prompt):
    assert system_prompt_problem(prompt, MATH) is None


def test_a_json_format_in_a_system_prompt_passes():
    prompt = 'You triage customer emails. Reply with JSON: {"category": "billing", "priority": "low", "summary": "..."}'
    assert system_prompt_problem(prompt, SUPPORT) is None


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        ("Solve it.", "too short"),
        ("You solve math word problems. " * 60, "cut off at 1500"),
        ("math_word_problems_solver system prompt_v2", "not natural language (3 words)"),
        (
            "Solve math 3.14159 2.71828 problems 1.41421 by 1.73205 step 2.23606 and 0.57721 answer 1.61803",
            "letters and spaces",
        ),
        ('{"system_prompt": "You solve math word problems step by step and answer."}', "JSON, code or template"),
        ("[[ ## system_prompt ## ]] You solve math word problems step by step.", "JSON, code or template"),
        ("You solve math word problems about {{topic}} step by step.", "JSON, code or template"),
        (
            "Solve the math problem. Solve the math problem. Solve the math problem. Solve the math problem.",
            "repetition loop",
        ),
        ("You are a helpful assistant. Be polite and friendly to everyone you talk to.", "unrelated to the task"),
    ],
)
def test_bad_system_prompts_are_rejected_with_the_reason(prompt, reason):
    problem = system_prompt_problem(prompt, MATH)
    assert problem is not None and reason in problem
