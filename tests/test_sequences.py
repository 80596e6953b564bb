"""Assistant-token masking: only the tokens the policy sampled are trained on."""

import math

from tiny import choice

from autorl import Trajectory
from autorl.sequences import tokenize_trajectory

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Reply to a customer asking for a refund."}


def trained(seq):
    return [t for t, m in zip(seq.input_ids, seq.mask) if m]


def test_sampled_tokens_are_the_only_trained_tokens(tokenizer):
    reply_ids = tokenizer.encode("Yes, please.", add_special_tokens=False) + [tokenizer.eos_token_id]
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
    first = tokenizer.encode("yes", add_special_tokens=False) + [tokenizer.eos_token_id]
    second = tokenizer.encode("no", add_special_tokens=False) + [tokenizer.eos_token_id]
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


def test_truncated_sample_leaves_end_of_turn_as_context(tokenizer):
    ids = tokenizer.encode("Yes, ple", add_special_tokens=False)  # cut off by max_tokens: no end-of-turn token
    traj = Trajectory(messages_and_choices=[USER, choice("Yes, ple", ids), {"role": "user", "content": "go on"}])
    seq = tokenize_trajectory(traj, tokenizer)
    assert trained(seq) == ids
