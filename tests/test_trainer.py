"""The PEFT GRPO trainer on a tiny random Llama: it learns a toy reward, checkpoints and resumes."""

import json

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from autorl import TrainConfig, TrainerConfig, Trajectory, TrajectoryGroup
from autorl.training.checkpoints import latest_checkpoint
from autorl.training.trainer import GRPOTrainer
from tests.helpers.tiny import choice

PROMPTS = [[{"role": "user", "content": text}] for text in ("yes or no?", "say thanks", "the refund", "a tool")]
COMPLETION_TOKENS = 6


def sample_groups(trainer: GRPOTrainer, target: range, group_size: int, generator: torch.Generator):
    """Sample completions from the current policy; reward = fraction of tokens whose id is in `target`."""
    tok, model = trainer.tokenizer, trainer.model
    model.eval()
    groups = []
    for messages in PROMPTS:
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        ids = prompt["input_ids"].repeat(group_size, 1).to(trainer.device)  # CUDA when there is one
        with torch.no_grad():
            completion, logprobs = [], []
            for _ in range(COMPLETION_TOKENS):  # plain ancestral sampling, as an inference server does
                logits = model(input_ids=torch.cat([ids, *completion], dim=1) if completion else ids).logits[:, -1]
                dist = torch.log_softmax(logits.float(), -1)
                nxt = torch.multinomial(dist.exp().cpu(), 1, generator=generator).to(dist.device)
                completion.append(nxt)
                logprobs.append(dist.gather(-1, nxt))
        sampled = torch.cat(completion, 1).tolist()
        lps = torch.cat(logprobs, 1).tolist()
        trajectories = [
            Trajectory(
                messages_and_choices=[*messages, choice(tok.decode(s, skip_special_tokens=True), s, lp)],
                reward=sum(t in target for t in s) / len(s),
            )
            for s, lp in zip(sampled, lps, strict=False)
        ]
        groups.append(TrajectoryGroup(trajectories))
    return groups


def mean_reward(groups):
    rewards = [t.reward for g in groups for t in g.trajectories]
    return sum(rewards) / len(rewards)


def test_grpo_steps_raise_a_toy_reward(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", TrainerConfig(lora_rank=8, seed=0))
    target = range(len(trainer.tokenizer) // 4)  # a quarter of the vocabulary: ~25% reward at random
    generator = torch.Generator().manual_seed(0)
    before = mean_reward(sample_groups(trainer, target, 32, generator))
    config = TrainConfig(learning_rate=5e-2, micro_batch_size=16)
    for _ in range(12):
        metrics = trainer.step(sample_groups(trainer, target, 8, generator), config)
        assert metrics["trained_tokens"] > 0 and metrics["grad_norm"] > 0
    after = mean_reward(sample_groups(trainer, target, 32, generator))
    assert after > before + 0.1, (before, after)


def test_tied_groups_are_skipped_and_reported(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", TrainerConfig())
    groups = sample_groups(trainer, target=range(0), group_size=4, generator=torch.Generator().manual_seed(1))
    weights = {n: p.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    metrics = trainer.step(groups, TrainConfig())  # an empty target: every reward is 0
    assert metrics["groups_skipped_tied"] == len(PROMPTS) and metrics["groups_trained"] == 0
    assert metrics["trained_tokens"] == 0
    assert all(torch.equal(p, weights[n]) for n, p in trainer.model.named_parameters() if p.requires_grad)
    assert metrics["drift_tokens"] == len(PROMPTS) * 4 * COMPLETION_TOKENS  # the sentinel sees tied groups too


def test_the_sentinel_measures_how_far_the_policy_moved_from_the_base(tiny_model, tmp_path):
    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", TrainerConfig(lora_rank=8, seed=0))
    target = range(len(trainer.tokenizer) // 4)
    generator = torch.Generator().manual_seed(3)
    config = TrainConfig(learning_rate=5e-2, micro_batch_size=16)
    groups = sample_groups(trainer, target, 8, generator)  # before step 1 the policy is the base model
    sampled = [lp.logprob for g in groups for t in g.trajectories for lp in t.messages_and_choices[-1].logprobs.content]
    first = trainer.step(groups, config)
    assert first["kl_to_base"] < 1e-3  # the base model on its own samples
    assert abs(first["base_logprob"] - sum(sampled) / len(sampled)) < 0.02
    for _ in range(4):  # the same groups again (off-policy, but it moves the LoRA at a fraction of the sampling)
        trainer.step(groups, config)
    last = trainer.step(sample_groups(trainer, target, 8, generator), config)  # the policy's own samples
    # the LoRA moved the policy: its samples are less likely to the base model
    assert last["kl_to_base"] > 0.05, (first, last)
    assert last["base_logprob"] < first["base_logprob"]


def test_checkpoint_is_peft_format_and_training_resumes_from_it(tiny_model, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    trainer = GRPOTrainer(tiny_model, checkpoints, TrainerConfig())
    groups = sample_groups(trainer, range(len(trainer.tokenizer) // 2), 4, torch.Generator().manual_seed(2))
    metrics = trainer.step(groups, TrainConfig())
    assert metrics["groups_trained"] > 0
    path = trainer.save(1, metrics)
    assert latest_checkpoint(checkpoints) == (1, path)
    assert json.loads((path / "metrics.json").read_text())["step"] == 1
    assert json.loads((path / "adapter_config.json").read_text())["r"] == 8

    # loadable by plain transformers + PEFT, and a new trainer resumes with the same weights
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), path)
    resumed = GRPOTrainer(tiny_model, checkpoints, TrainerConfig())
    lora = {n: p for n, p in trainer.model.named_parameters() if "lora_" in n}
    for name, param in loaded.named_parameters():
        if "lora_" in name:
            assert torch.allclose(param, lora[name].cpu())
    assert resumed.optimizer.state_dict()["state"], "optimizer state restored"
    assert not list(checkpoints.glob(".*")), "no temporary directory left behind"


def test_the_base_pass_scores_policy_tokens_as_a_plain_forward_of_the_base_model(tiny_model, tmp_path):
    from autorl.training.loss import token_logprobs
    from autorl.training.sequences import tokenize_trajectory

    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", TrainerConfig(dtype="float32", lora_rank=8))
    generator = torch.Generator().manual_seed(4)
    trainer.step(sample_groups(trainer, range(40), 4, generator), TrainConfig(learning_rate=5e-2))  # LoRA != 0
    system = {"role": "system", "content": "You are a helpful assistant. Answer politely and briefly. " * 3}
    trajectories = [  # one long shared prompt (prompt sharing's KV cache) and a short other one
        Trajectory(messages_and_choices=[system, {"role": "user", "content": "the refund"}, choice("a", [5, 9, 7])]),
        Trajectory(messages_and_choices=[system, {"role": "user", "content": "the refund"}, choice("b", [6, 8])]),
        Trajectory(messages_and_choices=[{"role": "user", "content": "yes?"}, choice("c", [11, 12, 13, 14])]),
    ]
    sequences = [tokenize_trajectory(t, trainer.tokenizer) for t in trajectories]
    for micro_batch_size in (1, 2, 3):
        scored = trainer._base_logprobs(sequences, micro_batch_size)
        for sequence, base in zip(sequences, scored, strict=True):
            ids = torch.tensor([sequence.input_ids])
            with torch.no_grad(), trainer.model.disable_adapter():
                plain = token_logprobs(trainer.model(input_ids=ids).logits, ids, with_entropy=False)[0][0]
            trained = torch.tensor(sequence.mask[1:], dtype=torch.bool)
            assert torch.allclose(base[trained], plain[trained], atol=1e-5), micro_batch_size
