"""Judge input tokens: RULER's one deduplicated group prompt against judging each trajectory on its own.

A group of G=8 agent rollouts shares a ~500-token prefix (system prompt, tool-using task with a
document); each rollout then differs (a tool call, its result, a final answer). RULER sends the
prefix once and every rollout's remainder under its id; the baseline sends one judge request per
rollout, each with the rubric and the whole conversation, in the same prompt format.

Tokens are counted with the embedded model's tokenizer (SmolLM2, via autorl's embedded model
directory) on the chat-templated judge messages. Where that tokenizer is unavailable the count falls
back to an approximation of one token per 4 characters, and the result says so.

    python benchmarks/perf/perf_judge_tokens.py  # prints the ratio, writes benchmarks/perf/results/judge_tokens.json
"""

from __future__ import annotations

import json
from collections.abc import Callable

from _common import write_result

from ruler import DEFAULT_RUBRIC
from ruler.prompt import build_judge_prompt

GROUP_SIZE = 8
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_policy",
            "description": "Search the refund policy for a phrase; returns the matching paragraphs.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]
POLICY = " ".join(
    f"Section {n}. Orders placed through the online store may be returned within {10 + n} days of delivery "
    f"when the item is unused and in its original packaging; category {n} items need a receipt, and refunds "
    f"go to the original payment method within {n + 2} business days after the warehouse inspects the return."
    for n in range(1, 8)
)


def shared_prefix() -> list[dict]:
    return [
        {
            "role": "system",
            "content": "You are a customer-support agent for an online store. Answer from the refund policy only; "
            "call search_policy to look things up, cite the section you used, and keep answers short and polite.",
        },
        {
            "role": "user",
            "content": f"Here is our refund policy:\n{POLICY}\n\nCustomer question: I bought headphones (category 3) "
            "18 days ago, opened the box but never used them. Can I still return them, and when do I get my money?",
        },
    ]


def rollout(i: int) -> list[dict]:
    """One rollout's own continuation: a tool call, its result, and a final answer that varies in quality."""
    arguments = json.dumps({"query": f"category 3 return window variant {i}"})
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "search_policy", "arguments": arguments}}
    answers = [
        "Yes: under Section 3 you have 13 days, so at 18 days the return window has closed, sorry.",
        "Yes, you can return them within 30 days; refunds take about a week.",
        "Section 3 allows returns within 13 days of delivery. At 18 days that window has passed, so a return "
        "is no longer possible; if it were, the refund would reach your card within 5 business days.",
        "I am not sure, please contact support.",
    ]
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": f"call_{i}",
            "content": "Section 3: returns within 13 days of delivery; refund within 5 business days.",
        },
        {"role": "assistant", "content": f"{answers[i % len(answers)]} (draft {i})"},
    ]


def token_counter() -> tuple[Callable[[list[dict]], int], str]:
    """Count a judge request's input tokens: the embedded tokenizer over the chat template, else chars/4."""
    try:
        from transformers import AutoTokenizer

        from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model

        model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception as exc:  # no embedded model here: fall back to the documented approximation
        print(f"embedded tokenizer unavailable ({type(exc).__name__}: {exc}); approximating 1 token per 4 chars")
        return (lambda messages: sum(len(m["content"]) for m in messages) // 4), "approximation: characters / 4"

    def count(messages: list[dict]) -> int:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count, f"SmolLM2-135M-Instruct tokenizer ({model_dir})"


def main() -> None:
    count, tokenizer = token_counter()
    prefix = shared_prefix()
    group = [prefix + rollout(i) for i in range(GROUP_SIZE)]

    prefix_tokens = count(prefix)
    ruler_prompt = build_judge_prompt(group, DEFAULT_RUBRIC, TOOLS)
    ruler_tokens = count(ruler_prompt.messages)
    per_trajectory = [count(build_judge_prompt([messages], DEFAULT_RUBRIC, TOOLS).messages) for messages in group]
    baseline_tokens = sum(per_trajectory)
    ratio = ruler_tokens / baseline_tokens

    result = {
        "benchmark": "judge input tokens, RULER group prompt vs per-trajectory judging",
        "group_size": GROUP_SIZE,
        "shared_prefix_tokens": prefix_tokens,
        "ruler_prefix_messages_sent_once": ruler_prompt.prefix_length,
        "ruler_tokens": ruler_tokens,
        "per_trajectory_tokens_total": baseline_tokens,
        "per_trajectory_tokens_each": per_trajectory,
        "ratio": round(ratio, 4),
        "goal": "ratio <= 1/3",
        "goal_met": ratio <= 1 / 3,
        "tokenizer": tokenizer,
    }
    path = write_result("judge_tokens", result)
    print(f"G={GROUP_SIZE}, shared prefix {prefix_tokens} tokens ({tokenizer})")
    print(f"RULER, one deduplicated request: {ruler_tokens} input tokens")
    print(f"per-trajectory judging, {GROUP_SIZE} requests: {baseline_tokens} input tokens")
    print(f"ratio RULER / per-trajectory: {ratio:.3f} (goal <= 0.333: {'met' if ratio <= 1 / 3 else 'NOT met'})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
