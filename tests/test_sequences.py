"""Assistant-token masking: only the tokens the policy sampled are trained on."""

import copy
import math

from autorl import Trajectory
from autorl.training.sequences import tokenize_trajectory
from autorl.trajectories import CONSTRAINED_CHOICES
from tests.helpers.tiny import choice

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Reply to a customer asking for a refund."}


def trained(seq):
    return [t for t, m in zip(seq.input_ids, seq.mask, strict=False) if m]


def test_sampled_tokens_are_the_only_trained_tokens(tokenizer):
    reply_ids = [*tokenizer.encode("Yes, please.", add_special_tokens=False), tokenizer.eos_token_id]
    logprobs = [-0.5 - i for i in range(len(reply_ids))]
    traj = Trajectory(messages_and_choices=[SYSTEM, USER, choice("Yes, please.", reply_ids, logprobs)])
    seq = tokenize_trajectory(traj, tokenizer)

    prompt = tokenizer.apply_chat_template([SYSTEM, USER], tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert seq.input_ids == prompt_ids + reply_ids
    assert seq.mask == [0] * len(prompt_ids) + [1] * len(reply_ids)
    assert seq.logprobs[len(prompt_ids) :] == logprobs
    assert all(math.isnan(lp) for lp in seq.logprobs[: len(prompt_ids)])


def test_multi_turn_trains_each_choice_and_not_dict_assistant_messages(tokenizer):
    first = [*tokenizer.encode("yes", add_special_tokens=False), tokenizer.eos_token_id]
    second = [*tokenizer.encode("no", add_special_tokens=False), tokenizer.eos_token_id]
    traj = Trajectory(
        messages_and_choices=[
            SYSTEM,
            USER,
            {"role": "assistant", "content": "an example reply, not sampled"},
            {"role": "user", "content": "thanks"},
            choice("yes", first),
            {"role": "tool", "content": "a tool result"},
            choice("no", second),
        ]
    )
    seq = tokenize_trajectory(traj, tokenizer)
    assert trained(seq) == first + second
    # the whole sequence is exactly the chat template's rendering of the conversation
    full = tokenizer.apply_chat_template(traj.messages(), tokenize=False)
    assert tokenizer.decode(seq.input_ids) + "\n" == full
    span_starts = [i for i in range(1, len(seq.mask)) if seq.mask[i] and not seq.mask[i - 1]]
    assert len(span_starts) == 2  # two separate trained spans


def test_choice_without_logprobs_trains_the_template_reply_with_unknown_old_logprobs(tokenizer):
    traj = Trajectory(messages_and_choices=[USER, choice("Yes, please.")])
    seq = tokenize_trajectory(traj, tokenizer)
    assert tokenizer.decode(trained(seq)) == "Yes, please.<|im_end|>\n"
    assert all(math.isnan(lp) for lp in seq.logprobs)


def test_a_choice_sampled_under_a_grammar_trains_its_ids_with_unknown_old_logprobs(tokenizer):
    """A forced call's server logprobs are the masked distribution's (a forced token reads 0): taken as the
    policy's, they would weigh the forced tokens' gradient by the policy's tiny probability of them."""
    forced = [
        *tokenizer.encode('<tool_call>{"name": "f"}</tool_call>', add_special_tokens=False),
        tokenizer.eos_token_id,
    ]
    free = [*tokenizer.encode("done", add_special_tokens=False), tokenizer.eos_token_id]
    items = [USER, choice("", forced, [0.0] * len(forced)), {"role": "tool", "content": "7"}, choice("done", free)]
    traj = Trajectory(messages_and_choices=items, metadata={CONSTRAINED_CHOICES: [1]})
    seq = tokenize_trajectory(traj, tokenizer)
    assert trained(seq) == forced + free
    logprobs = [lp for lp, m in zip(seq.logprobs, seq.mask, strict=True) if m]
    assert all(math.isnan(lp) for lp in logprobs[: len(forced)])
    assert logprobs[len(forced) :] == [-1.0] * len(free)  # the turn sampled freely keeps the server's


def test_truncated_sample_leaves_end_of_turn_as_context(tokenizer):
    ids = tokenizer.encode("Yes, ple", add_special_tokens=False)  # cut off by max_tokens: no end-of-turn token
    traj = Trajectory(messages_and_choices=[USER, choice("Yes, ple", ids), {"role": "user", "content": "go on"}])
    seq = tokenize_trajectory(traj, tokenizer)
    assert trained(seq) == ids


def test_a_three_turn_tool_trajectory_trains_the_model_turns_only(tokenizer):
    """With the embedded model's template: two tool calls and a final answer are trained; the tool
    results, the tools in the system turn and the user's input are context."""
    from openai.types.chat.chat_completion import Choice

    from autorl.serving.embedded import TEMPLATES

    tokenizer = copy.copy(tokenizer)
    tokenizer.chat_template = (TEMPLATES / "smollm2_tools.jinja").read_text()
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]

    def call_choice(arguments: str) -> tuple[Choice, list[int]]:
        text = f'<tool_call>\n{{"name": "add", "arguments": {arguments}}}\n</tool_call>'
        ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        sampled = choice("", ids)
        call = {"id": f"c{arguments}", "type": "function", "function": {"name": "add", "arguments": arguments}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return sampled.model_copy(
            update={"message": sampled.message.model_validate(message), "finish_reason": "tool_calls"}
        ), ids

    first, first_ids = call_choice('{"a": 1}')
    second, second_ids = call_choice('{"a": 2}')
    answer_ids = [*tokenizer.encode("yes", add_special_tokens=False), tokenizer.eos_token_id]
    traj = Trajectory(
        messages_and_choices=[
            SYSTEM, USER,
            first, {"role": "tool", "tool_call_id": 'c{"a": 1}', "content": "3"},
            second, {"role": "tool", "tool_call_id": 'c{"a": 2}', "content": "4"},
            choice("yes", answer_ids),
        ],
        tools=tools,
    )  # fmt: skip
    seq = tokenize_trajectory(traj, tokenizer)
    assert trained(seq) == first_ids + second_ids + answer_ids
    span_starts = [i for i in range(1, len(seq.mask)) if seq.mask[i] and not seq.mask[i - 1]]
    assert len(span_starts) == 3
    context = tokenizer.decode([t for t, m in zip(seq.input_ids, seq.mask, strict=False) if not m])
    assert "<tool_response>\n3\n</tool_response>" in context and "<tool_response>\n4\n</tool_response>" in context
    assert '"name": "add"' in context.split("<|im_start|>user")[0]  # the tools, in the system turn
    # what the trainer sees is the template's rendering of the whole conversation
    assert tokenizer.decode(seq.input_ids) + "\n" == tokenizer.apply_chat_template(
        traj.messages(), tools=tools, tokenize=False
    )
