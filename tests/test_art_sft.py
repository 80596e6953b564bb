"""ART's supervised fine-tuning: `model.train_sft(trajectories, TrainSFTConfig(...))` trains the assistant turns of
whole conversations (multi-turn and tool calls included: `tokenize_trajectory(..., trained="all"|"last")`), one
optimizer step per batch at its learning rate; its checkpoint is the model's next step and RL continues from it,
on the local and remote backends (the cluster's: tests/test_art_training_api.py). `autorl.utils.sft` reads ART's
JSONL (`iterate_file`) and cuts a run into chunks with one schedule (`create_sft_dataset_iterator`)."""

from __future__ import annotations

import asyncio
import json

import pytest
from transformers import AutoTokenizer

import autorl as art
from autorl.backends.run_dir import read_history
from autorl.config import TrainerConfig
from autorl.errors import AutoRLError
from autorl.training.sequences import tokenize_trajectory
from autorl.training.trainer import GRPOTrainer
from autorl.types import TrainSFTConfig
from autorl.utils.sft import SFTChunk, create_lr_schedule, create_sft_dataset_iterator, iterate_file
from tests.helpers.remote import TOKEN, trainable
from tests.helpers.training import groups, local_backend

TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "yes"}'}}
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Reply to a customer asking for a refund."},
    {"role": "assistant", "content": "yes", "tool_calls": [TOOL_CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a tool result"},
    {"role": "assistant", "content": "Yes, please."},
]


def conversation(answer: str = "Yes, please.") -> art.Trajectory:
    return art.Trajectory(messages_and_choices=[*CONVERSATION[:-1], {"role": "assistant", "content": answer}])


def trained_text(sequence, tokenizer) -> str:
    return tokenizer.decode([t for t, m in zip(sequence.input_ids, sequence.mask, strict=True) if m])


def test_sft_trains_every_assistant_turn_or_the_last_and_rl_only_the_sampled_ones(tokenizer):
    trajectory = conversation()
    assert trained_text(tokenize_trajectory(trajectory, tokenizer, "all"), tokenizer) == (
        "yes<|im_end|>\nYes, please.<|im_end|>\n"
    )
    assert trained_text(tokenize_trajectory(trajectory, tokenizer, "last"), tokenizer) == "Yes, please.<|im_end|>\n"
    assert not any(tokenize_trajectory(trajectory, tokenizer).mask)  # RL: no policy `Choice`, nothing trained


def test_an_sft_step_takes_one_optimizer_step_per_batch_at_its_rate_and_lowers_the_loss(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", TrainerConfig(dtype="float32"))
    data = [conversation(), conversation("No, thanks."), art.Trajectory(messages_and_choices=CONVERSATION[:2])]
    steps = []
    trainer.optimizer.step = (lambda step: lambda *a, **k: (steps.append(trainer.optimizer.param_groups[0]["lr"]),
                                                            step(*a, **k))[1])(trainer.optimizer.step)  # fmt: skip
    first = trainer.sft_step(data, TrainSFTConfig(learning_rate=[1e-2, 5e-3], batch_size=2))
    assert steps == [1e-2]  # the second batch holds only the conversation without an assistant turn
    assert (first["batches"], first["trajectories"], first["trajectories_untrained"]) == (1, 3, 1)
    assert first["trained_tokens"] > 0 and first["learning_rate"] == 1e-2 and first["sft"] == 1.0
    losses = [first["loss"]] + [
        trainer.sft_step(data[:2], TrainSFTConfig(learning_rate=1e-2))["loss"] for _ in range(4)
    ]
    assert losses[-1] < losses[0], losses  # the assistant tokens get likelier
    with pytest.raises(AutoRLError, match="3 learning rates for 2 batches of 2"):
        TrainSFTConfig(learning_rate=[1e-3] * 3, batch_size=2).rates(4)


def test_train_sft_on_the_local_backend_is_the_next_step_served_and_rl_continues_from_it(
    tmp_path,
    tiny_model,
    chat,
):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    backend = local_backend(tmp_path, chat)
    model = trainable(tiny_model)

    async def program():
        await model.register(backend)
        sft = await model.train_sft([conversation()] * 3, TrainSFTConfig(learning_rate=1e-3, batch_size=2))
        served_after_sft = model.get_inference_name()
        rl = await backend.train(model, groups(tokenizer), learning_rate=1e-9)
        return sft, served_after_sft, rl, await model.get_step()

    sft, served_after_sft, rl, step = asyncio.run(program())
    backend.close()
    assert (sft.step, rl.step, step) == (1, 2, 2) and served_after_sft == "lora-1"  # served as any checkpoint
    assert sft.checkpoint_path and sft.metrics["batches"] == 2
    history = read_history(backend.run_dir(model))
    assert [(h["step"], h.get("sft")) for h in history] == [(1, 1.0), (2, None)]


def test_train_sft_on_the_remote_backend_goes_over_the_training_route(served, tiny_model):
    backend = art.RemoteBackend(served.url, api_key=TOKEN)
    model = trainable(tiny_model)

    async def program():
        await model.register(backend)
        return await model.train_sft([conversation()], TrainSFTConfig(learning_rate=[1e-3]))

    result = asyncio.run(program())
    backend.close()
    assert result.step == 1 and result.metrics["trained_tokens"] > 0 and result.checkpoint_path is None
    assert [h["step"] for h in read_history(served.served.backend.run_dir(model))] == [1]


def test_iterate_file_reads_art_s_jsonl_with_tools_and_names_a_bad_line(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"messages": CONVERSATION, "tools": [{"type": "function", "function": {"name": "lookup"}}]}]
    rows += [
        {"messages": [{"role": "user", "content": str(i)}, {"role": "assistant", "content": "ok"}]} for i in range(4)
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    read = list(iterate_file(path, epochs=2, shuffle_buffer_size=2, seed=1))
    assert len(read) == 10 and sum(t.tools is not None for t in read) == 2
    assert sorted(t.messages()[0]["content"] for t in read[:5]) == sorted(r["messages"][0]["content"] for r in rows)
    assert [t.messages() for t in iterate_file(path, shuffle_buffer_size=1)] == [r["messages"] for r in rows]
    assert len(list(iterate_file(path, initial_skip=3))) == 2
    path.write_text(json.dumps(rows[0]) + "\n" + '{"messages": "hi"}\n')
    with pytest.raises(AutoRLError, match=r"train.jsonl:2: expected an object with \"messages\""):
        list(iterate_file(path))


def test_the_iterator_cuts_chunks_with_one_schedule_over_the_whole_run():
    assert create_lr_schedule(4, 1.0, "linear", warmup_steps=1) == [1.0, 1.0, 0.5, 0.0]
    assert create_lr_schedule(3, 2.0, "constant") == [2.0] * 3
    assert [round(r, 6) for r in create_lr_schedule(3, 1.0, "cosine")] == [1.0, 0.5, 0.0]
    data = [conversation(str(i)) for i in range(5)]
    chunks = list(create_sft_dataset_iterator(data, chunk_size=2, epochs=2, batch_size=2, peak_lr=1.0,
                                              warmup_ratio=0, show_progress=False))  # fmt: skip
    assert all(isinstance(c, SFTChunk) for c in chunks)
    assert [(len(c.trajectories), c.step, c.epoch, c.epoch_step) for c in chunks] == [
        (4, 0, 0, 0), (1, 2, 0, 2), (4, 3, 1, 0), (1, 5, 1, 2)
    ]  # fmt: skip
    rates = [rate for c in chunks for rate in c.config.learning_rate]
    assert rates == create_lr_schedule(6, 1.0, "linear") and all(c.config.batch_size == 2 for c in chunks)
    assert [c.step for c in create_sft_dataset_iterator(data, 2, 2, 2, initial_step=3, show_progress=False)] == [3, 5]
    again = create_sft_dataset_iterator(data, 2, 2, 2, show_progress=False)
    assert [c.trajectories for c in again] == [c.trajectories for c in chunks]  # each epoch's order: its seed's
    unshuffled = next(create_sft_dataset_iterator(data, 2, 1, 2, shuffle=False, show_progress=False))
    assert unshuffled.trajectories == data[:4] and {id(t) for t in chunks[0].trajectories} <= {id(t) for t in data}
