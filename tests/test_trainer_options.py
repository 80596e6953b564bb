"""The trainer's options: a group's prompt shared in the forward pass gives the same update as running
every sequence whole, and so does eager attention instead of the model's own; dtype "auto" picks bf16
only where the hardware runs it natively; every loss variant trains, and the KL penalty measures the
distance to the base model; PPO epochs reuse a batch and truncated completions can be left out."""

import asyncio
import math
import threading
import time

import pytest
import torch
from transformers import AutoTokenizer

import autorl.cpu
import autorl.serving.config
from autorl import TrainableModel, TrainConfig, TrainerConfig
from autorl.backends.local import LocalBackend
from autorl.backends.model_backend import ModelSlot
from autorl.errors import AutoRLError
from autorl.serving.config import ServerConfig
from autorl.training.forwards import MIN_SHARED_PREFIX, shared_prefix_length
from autorl.training.loss import overlong_penalty
from autorl.training.sequences import tokenize_trajectory
from autorl.training.trainer import GRPOTrainer, longest_turn, training_dtype
from tests.helpers.training import ServingStandIn, groups


def record_gradients(trainer: GRPOTrainer) -> list[dict[str, torch.Tensor]]:
    """The LoRA gradients of every optimizer step (compared rather than weights: Adam's g / sqrt(v)
    turns float rounding of a near-zero gradient into a full-size update)."""
    recorded, step = [], trainer.optimizer.step

    def recording_step(*args, **kwargs):
        recorded.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad})
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    return recorded


def assert_same_updates(reference: tuple[list[dict], list[dict]], other: tuple[list[dict], list[dict]]) -> None:
    """Two trainers' (step metrics, recorded gradients) agree up to float rounding."""
    for expected, got in zip(reference[0], other[0], strict=True):
        assert got["trained_tokens"] == expected["trained_tokens"]
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-4, abs=1e-6)
        assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-4)
        assert got["ratio_mean"] == pytest.approx(expected["ratio_mean"], rel=1e-5)
        assert got["base_logprob"] == pytest.approx(expected["base_logprob"], rel=1e-5)
    for expected, got in zip(reference[1], other[1], strict=True):
        for name, grad in expected.items():  # float32 rounding of sums taken in another order (other kernels) is
            # relative to the tensor's scale, not to each element's: a near-zero element differs by it too
            torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-4 * float(grad.abs().max()))


@pytest.mark.parametrize("micro_batch_size", [4, 3])
def test_sharing_the_prompt_gives_the_same_update(tiny_model, tmp_path, micro_batch_size):
    config = TrainConfig(learning_rate=1e-2, micro_batch_size=micro_batch_size)
    results = {}
    for share in (False, True):
        trainer = GRPOTrainer(
            tiny_model, tmp_path / str(share), TrainerConfig(seed=0, dtype="float32", share_prompt_prefix=share)
        )
        data = groups(trainer.tokenizer)
        gradients = record_gradients(trainer)
        decoder = trainer.model.get_base_model().get_decoder()  # under the output head: every pass runs it
        forward, continued = decoder.forward, []

        def counting_forward(*args, forward=forward, continued=continued, **kwargs):
            continued.append(kwargs.get("past_key_values") is not None)
            return forward(*args, **kwargs)

        decoder.forward = counting_forward
        metrics = [trainer.step(data, config) for _ in range(2)]
        assert any(continued) == share  # the shared path ran (and only when asked for)
        results[share] = (metrics, gradients)
    assert_same_updates(results[False], results[True])


def test_logprobs_from_chunks_of_the_output_head_are_a_plain_forwards_with_the_same_gradients(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path / "c", TrainerConfig(seed=0, dtype="float32", logprob_chunk_tokens=5))
    trainer.step(groups(trainer.tokenizer), TrainConfig(learning_rate=5e-2))  # the LoRA away from 0
    group = [tokenize_trajectory(t, trainer.tokenizer) for t in groups(trainer.tokenizer)[1].trajectories]
    input_ids, attention, mask, _ = trainer._pad(group)
    assert shared_prefix_length(input_ids, mask) >= MIN_SHARED_PREFIX  # prompt sharing's continuation runs too
    trained, weights = mask[:, 1:].bool(), torch.rand(input_ids.shape[0], input_ids.shape[1] - 1)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    chunked, entropy = trainer._token_logprobs(input_ids, attention, mask)
    chunked_gradients = torch.autograd.grad((chunked * weights * trained).sum(), params)

    plain = torch.log_softmax(trainer.model(input_ids=input_ids, attention_mask=attention).logits[:, :-1], dim=-1)
    expected = plain.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    plain_gradients = torch.autograd.grad((expected * weights * trained).sum(), params)
    torch.testing.assert_close(chunked[trained], expected[trained])
    torch.testing.assert_close(entropy[trained], -(plain.exp() * plain).sum(-1)[trained].detach())
    scale = max(float(g.abs().max()) for g in plain_gradients)
    assert scale > 0.1
    for got, want in zip(chunked_gradients, plain_gradients, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * scale)  # float32 rounding of a sum


def test_the_update_is_the_same_with_or_without_chunks_and_a_kl_penalty(tiny_model, tmp_path):
    """Two steps with the KL penalty (the base pass's reference and the sentinel's figures too), micro-batches
    of 3, the output head over 7 positions at a time against the whole logits (0)."""
    config = TrainConfig(learning_rate=1e-2, micro_batch_size=3, kl_beta=0.1)
    results = {}
    for chunk in (0, 7):
        trainer = GRPOTrainer(
            tiny_model, tmp_path / str(chunk), TrainerConfig(seed=0, dtype="float32", logprob_chunk_tokens=chunk)
        )
        gradients = record_gradients(trainer)
        results[chunk] = ([trainer.step(groups(trainer.tokenizer), config) for _ in range(2)], gradients)
    assert_same_updates(results[0], results[7])
    for expected, got in zip(results[0][0], results[7][0], strict=True):
        assert got["kl_to_base"] == pytest.approx(expected["kl_to_base"], rel=1e-4, abs=1e-7)
        assert got["entropy"] == pytest.approx(expected["entropy"], rel=1e-5)


def test_gradient_checkpointing_gives_the_same_update(tiny_model, tmp_path):
    config = TrainConfig(learning_rate=1e-2, micro_batch_size=3)
    results = {}
    for checkpointing in (False, True):
        trainer = GRPOTrainer(
            tiny_model, tmp_path / str(checkpointing),
            TrainerConfig(seed=0, dtype="float32", gradient_checkpointing=checkpointing),
        )  # fmt: skip
        assert trainer.model.is_gradient_checkpointing == checkpointing
        gradients = record_gradients(trainer)
        results[checkpointing] = ([trainer.step(groups(trainer.tokenizer), config) for _ in range(2)], gradients)
    assert_same_updates(results[False], results[True])


def test_eager_attention_on_cpu_gives_the_same_update_as_the_models_own(tiny_model, tmp_path):
    config = TrainConfig(learning_rate=1e-2, micro_batch_size=3)
    results, ran = {}, {}
    for limit in (0, 10**6):  # never eager (the model's SDPA), always eager
        trainer = GRPOTrainer(
            tiny_model,
            tmp_path / str(limit),
            TrainerConfig(seed=0, dtype="float32", eager_attention_max_tokens=limit),
            device="cpu",
        )
        decoder = trainer.model.get_base_model().get_decoder()
        gradients, forward, ran[limit] = record_gradients(trainer), decoder.forward, set()

        def recording_forward(*args, forward=forward, seen=ran[limit], trainer=trainer, **kwargs):
            seen.add(trainer.model.get_base_model().config._attn_implementation)
            return forward(*args, **kwargs)

        decoder.forward = recording_forward
        results[limit] = ([trainer.step(groups(trainer.tokenizer), config) for _ in range(2)], gradients)
    assert ran[0] == {"sdpa"} and ran[10**6] == {"eager"}  # prompt sharing's KV-cache continuation included
    assert_same_updates(results[0], results[10**6])


def test_only_micro_batches_up_to_the_limit_run_eager_and_only_on_cpu(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path / "c", TrainerConfig(eager_attention_max_tokens=16), device="cpu")
    implementation = trainer.model.get_base_model().config
    for width, expected in ((16, "eager"), (17, "sdpa"), (3, "eager")):
        trainer._set_attention(width)
        assert implementation._attn_implementation == expected, width
    trainer.device = torch.device("cuda")  # the choice only: nothing runs
    trainer._set_attention(3)
    assert implementation._attn_implementation == "sdpa"


def test_the_shared_prefix_stops_before_the_first_trained_token_and_at_the_first_difference(tokenizer):
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 11, 12], [5, 6, 7, 8, 9, 0]])
    mask = torch.tensor([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 1]])
    assert shared_prefix_length(ids, mask) == 3  # token 4 is trained in row 2: logits at 3 must stay per row
    mask[1] = torch.tensor([0, 0, 0, 0, 0, 1])
    assert shared_prefix_length(ids, mask) == 4  # rows differ from token 4 on
    assert MIN_SHARED_PREFIX > 1


def test_auto_dtype_is_bf16_only_on_cpus_with_native_bf16(monkeypatch):
    """The trainer's and the vLLM server's auto dtype alike: bf16 only where the CPU multiplies it natively."""
    cpu = torch.device("cpu")
    monkeypatch.setattr(autorl.serving.config, "cuda_available", lambda: False)
    monkeypatch.setattr(autorl.cpu, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    assert training_dtype("auto", cpu) == torch.bfloat16
    assert ServerConfig().resolved_dtype() == "auto"  # vLLM serves the model's own dtype
    monkeypatch.setattr(autorl.cpu, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert training_dtype("auto", cpu) == torch.float32
    assert ServerConfig().resolved_dtype() == "float32"
    assert (
        training_dtype("bfloat16", cpu) == torch.bfloat16
        and ServerConfig(dtype="bfloat16").resolved_dtype() == "bfloat16"
    )


@pytest.mark.parametrize("loss", ["grpo", "dr_grpo", "dapo", "gspo", "cispo"])
def test_every_loss_variant_takes_a_step(tiny_model, tmp_path, loss):
    trainer = GRPOTrainer(tiny_model, tmp_path, TrainerConfig(seed=0, dtype="float32"))
    metrics = trainer.step(groups(trainer.tokenizer), TrainConfig(loss=loss, learning_rate=1e-2))
    assert math.isfinite(metrics["loss"]) and metrics["loss"] != 0 and metrics["grad_norm"] > 0
    assert metrics["entropy"] > 0
    assert metrics["clip_fraction"] == pytest.approx(metrics["clip_fraction_low"] + metrics["clip_fraction_high"])
    assert "kl" not in metrics  # kl_beta = 0: no reference pass, no metric


def test_kl_to_the_base_model_starts_at_zero_and_grows(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path, TrainerConfig(seed=0, dtype="float32"))
    data = groups(trainer.tokenizer)
    config = TrainConfig(learning_rate=5e-2, kl_beta=0.1)
    first = trainer.step(data, config)
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)  # LoRA B starts at zero: policy == reference
    later = [trainer.step(data, config) for _ in range(3)]
    assert later[-1]["kl"] > 1e-4


def test_with_a_kl_penalty_a_tied_group_is_trained_for_the_kl_alone(tiny_model, tmp_path):
    """kl_beta > 0: every completion pays the KL penalty, as in TRL; without it a tied group is left out."""
    trainer = GRPOTrainer(tiny_model, tmp_path, TrainerConfig(seed=0, dtype="float32"))
    data = groups(trainer.tokenizer)
    for trajectory in data[1].trajectories:
        trajectory.reward = 0.5
    plain = trainer.step(data, TrainConfig(learning_rate=1e-9))
    with_kl = trainer.step(data, TrainConfig(learning_rate=1e-9, kl_beta=0.1))
    tied_tokens = sum(longest_turn(t) for t in data[1].trajectories)
    assert plain["groups_skipped_tied"] == with_kl["groups_skipped_tied"] == 1
    assert with_kl["trained_tokens"] == plain["trained_tokens"] + tied_tokens


def test_ppo_epochs_take_one_optimizer_step_each_and_then_clip(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path, TrainerConfig(seed=0, dtype="float32"))
    steps = record_gradients(trainer)
    data = groups(trainer.tokenizer)
    metrics = trainer.step(data, TrainConfig(learning_rate=5e-2, ppo_epochs=3, kl_beta=0.1))
    assert len(steps) == 3  # three optimizer steps on one batch
    assert metrics["clip_fraction"] > 0  # the later epochs moved the policy past the clip range
    one = GRPOTrainer(tiny_model, tmp_path / "one", TrainerConfig(seed=0, dtype="float32"))
    single = one.step(data, TrainConfig(learning_rate=5e-2, kl_beta=0.1))
    assert single["sampler_logprob_gap"] == pytest.approx(metrics["sampler_logprob_gap"])  # measured before moving
    assert single["kl"] == pytest.approx(0.0, abs=1e-7) and metrics["kl"] > single["kl"]


def test_masked_truncated_completions_carry_no_gradient(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path, TrainerConfig(seed=0, dtype="float32"))
    data = groups(trainer.tokenizer)
    cut = data[0].trajectories[1].messages_and_choices[-1]
    data[0].trajectories[1].messages_and_choices[-1] = cut.model_copy(update={"finish_reason": "length"})
    kept = trainer.step(data, TrainConfig(learning_rate=1e-9))
    masked = trainer.step(data, TrainConfig(learning_rate=1e-9, mask_truncated=True))
    cut_tokens = len(cut.logprobs.content)
    assert masked["truncated_masked"] == 1 and "truncated_masked" not in kept
    assert masked["trained_tokens"] == kept["trained_tokens"] - cut_tokens
    assert masked["groups_trained"] == kept["groups_trained"] == 2  # its reward still counts in the group


def test_the_overlong_penalty_ranks_long_completions_below_short_ones_of_the_same_reward(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path, TrainerConfig(seed=0, dtype="float32"))
    data = groups(trainer.tokenizer)
    for group in data:  # every reward ties: no signal without the penalty
        for trajectory in group.trajectories:
            trajectory.reward = 1.0
    lengths = [longest_turn(t) for g in data for t in g.trajectories]
    config = TrainConfig(learning_rate=1e-9, overlong_buffer=4, max_completion_tokens=8)
    assert trainer.step(data, TrainConfig(learning_rate=1e-9))["groups_trained"] == 0
    metrics = trainer.step(data, config)
    expected = [overlong_penalty(n, 8, 4) for n in lengths]
    assert metrics["overlong_penalty"] == pytest.approx(sum(expected) / len(expected))
    assert metrics["overlong_penalty"] < 0
    assert metrics["groups_trained"] == sum(len(set(expected[i : i + 4])) > 1 for i in (0, 4)) > 0
    assert metrics["reward"] == 1.0  # the judge's
    with pytest.raises(AutoRLError, match="max_completion_tokens"):
        trainer.step(data, TrainConfig(overlong_buffer=4))


def test_the_backend_builds_steps_and_saves_the_trainer_on_one_thread(tiny_model, tmp_path, monkeypatch):
    threads = []
    for name in ("__init__", "step", "save"):
        method = getattr(GRPOTrainer, name)

        def recorded(self, *args, method=method, **kwargs):
            threads.append(threading.get_ident())
            return method(self, *args, **kwargs)

        monkeypatch.setattr(GRPOTrainer, name, recorded)
    model = TrainableModel(
        name="policy", project="p", base_model=str(tiny_model), trainer=TrainerConfig(seed=0, dtype="float32")
    )
    backend = LocalBackend(tmp_path)
    backend._slots[model.name] = ModelSlot(backend.run_dir(model), ServingStandIn())

    async def three_steps(tokenizer):
        for _ in range(3):  # other work on asyncio's worker threads in between, as a run has
            await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.05) for _ in range(4)))
            await backend.train(model, groups(tokenizer), TrainConfig(learning_rate=1e-9))

    asyncio.run(three_steps(AutoTokenizer.from_pretrained(tiny_model)))
    backend.close()
    assert len(threads) == 7 and len(set(threads)) == 1  # built once, then stepped and saved 3 times
    assert threads[0] != threading.get_ident()  # not on the event loop's thread
