"""Data-parallel LoRA training (`ClusterConfig.trainer_workers`, autorl/training/data_parallel.py): the
token-balanced split of a step's sequences; and on a local Ray cluster, two trainer workers (gloo, CPU)
against one trainer on the same groups: the same loss and gradient norm (relative 1e-5), the same sentinel
figures and the same LoRA (1e-4, a hundredth of one step's Adam update at the learning rate 1e-2) step
after step, a KL penalty included, and a supervised step. A worker killed between steps: the next step is redone on new workers
from the newest checkpoint and ends where the one trainer does, with no group lost or trained twice (either
would move the LoRA by about the learning rate, 100x the tolerance); a worker Ray killed for memory counts as
a death too."""

import asyncio
import importlib.util
import random

import pytest
import torch
from safetensors.torch import load_file

from autorl import TrainableModel, TrainConfig, TrainerConfig, TrainSFTConfig, Trajectory, TrajectoryGroup
from autorl.errors import AutoRLError
from autorl.training.data_parallel import DataParallel, Share, shard, share
from autorl.training.trainer import GRPOTrainer
from tests.helpers.tiny import choice

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (the dev extra has it)")

SYSTEM = "You are a helpful assistant. Answer politely and briefly."  # 60 tokens: a prefix the group shares


def scored_groups(tokenizer, seed: int) -> list[TrajectoryGroup]:
    """3 groups of 4 completions of 3-12 random tokens with sampling logprobs and random rewards."""
    rng = random.Random(seed)
    groups = []
    for index in range(3):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"question {index} please"}]
        trajectories = []
        for _ in range(4):
            ids = [rng.randrange(3, len(tokenizer)) for _ in range(rng.randint(3, 12))]
            logprobs = [-3 * rng.random() for _ in ids]
            completion = choice(tokenizer.decode(ids), ids, logprobs)
            trajectories.append(Trajectory(messages_and_choices=[*messages, completion], reward=rng.random()))
        groups.append(TrajectoryGroup(trajectories))
    return groups


def test_the_split_balances_token_counts_and_gives_every_sequence_to_one_rank():
    sizes = [50, 10, 40, 30, 20, 5]
    shards = [shard(sizes, rank, 2) for rank in range(2)]
    assert sorted(shards[0] + shards[1]) == list(range(len(sizes)))
    assert shards == [[0, 1, 4], [2, 3, 5]]  # longest first onto the least loaded: 80 and 75 tokens
    assert shard(sizes, 0, 1) == list(range(len(sizes)))
    # a rank with no sequence of its own runs another's, weighted 0, to take part in the gradient average
    assert share(["a"], [7], DataParallel(1, 2, "tcp://unused")) == Share(["a"], 0.0)
    assert share(["a"], [7], DataParallel(0, 2, "tcp://unused")) == Share(["a"], 2.0)
    assert share(["a", "b"], [7, 3], None) == Share(["a", "b"], 1.0)


@pytest.fixture(scope="module")
def placement():
    ray = pytest.importorskip("ray")
    from autorl.backends.cluster.backend import ClusterPlacement
    from autorl.backends.cluster.config import ClusterConfig
    from autorl.serving.config import ServerConfig

    placement = ClusterPlacement(ClusterConfig(ray="local", trainer_workers=2), ServerConfig())
    yield placement
    placement.close()
    ray.shutdown()


def lora(path) -> dict[str, torch.Tensor]:
    return load_file(path / "adapter_model.safetensors")


@needs_ray
@pytest.mark.timeout(300)
def test_two_trainer_workers_train_as_one_and_redo_a_step_a_killed_worker_cut(
    placement, tiny_model, tokenizer, tmp_path
):
    import ray

    from autorl.backends.cluster.trainer import ClusterTrainer

    trainer = TrainerConfig(dtype="float32", drift_every=1)  # the sentinel's figures on every step, to compare
    reference = GRPOTrainer(tiny_model, tmp_path / "reference", trainer)
    model = TrainableModel(name="dp", project="p", base_model=str(tiny_model), trainer=trainer)
    workers = ClusterTrainer(model, tmp_path / "run", placement)
    configs = {1: TrainConfig(learning_rate=1e-2, micro_batch_size=2), 2: TrainConfig(learning_rate=1e-2, kl_beta=0.1)}
    try:
        for step in (1, 2, 3):
            if step == 3:
                ray.kill(workers.actors[1], no_restart=True)  # rank 1's process ends between steps
            groups, config = scored_groups(tokenizer, step), configs.get(step, configs[1])
            expected = reference.step(groups, config)
            metrics = asyncio.run(workers.step(groups, config, step))
            for key in ("loss", "grad_norm", "entropy", "ratio_mean", "base_logprob", "kl_to_base"):
                assert metrics[key] == pytest.approx(expected[key], rel=1e-5), key
            for key in ("trained_tokens", "tokens", "groups_trained", "drift_tokens"):
                assert metrics[key] == expected[key], key
            if step == 2:
                assert metrics["kl"] == pytest.approx(expected["kl"], rel=1e-5)
            trained, ours = lora(reference.save(step, expected)), lora(tmp_path / "run" / "checkpoints" / f"000{step}")
            assert trained.keys() == ours.keys()
            assert max(float((trained[k] - ours[k]).abs().max()) for k in trained) < 1e-4
        assert workers.restarts == 1
        # a supervised step (ART's train_sft) splits and averages the same way
        sft = [t for g in scored_groups(tokenizer, 4) for t in g.trajectories]
        expected = reference.sft_step(sft, TrainSFTConfig(learning_rate=1e-2, batch_size=6))
        metrics = asyncio.run(workers.sft(sft, TrainSFTConfig(learning_rate=1e-2, batch_size=6), 4))
        assert (
            metrics["batches"] == expected["batches"] == 2 and metrics["trained_tokens"] == expected["trained_tokens"]
        )
        for key in ("loss", "grad_norm"):
            assert metrics[key] == pytest.approx(expected[key], rel=1e-5), key
        trained, ours = lora(reference.save(4, expected)), lora(tmp_path / "run" / "checkpoints" / "0004")
        assert max(float((trained[k] - ours[k]).abs().max()) for k in trained) < 1e-4
    finally:
        workers.close()


@needs_ray
def test_a_worker_killed_for_memory_is_reported_as_its_death_not_as_its_peer_s_broken_collective():
    """Ray's memory monitor kills a worker's task with `OutOfMemoryError`; its peer's gloo call then fails with
    "Connection closed by peer". The step must see the death (and redo the step on new workers), whichever
    failure came first."""
    import ray

    from autorl.backends.cluster.trainer import _all_or_death

    async def fail(error: BaseException, after_s: float):
        await asyncio.sleep(after_s)
        raise error

    async def both() -> None:
        peer = asyncio.ensure_future(fail(RuntimeError("gloo: Connection closed by peer"), 0.0))
        killed = asyncio.ensure_future(fail(ray.exceptions.OutOfMemoryError("killed for memory"), 0.05))
        await _all_or_death([peer, killed])

    with pytest.raises(ray.exceptions.OutOfMemoryError):
        asyncio.run(both())


@needs_ray
def test_more_trainer_workers_than_the_cluster_holds_is_one_error_line(placement):
    import ray

    from autorl.backends.cluster.config import ClusterConfig
    from autorl.backends.cluster.fit import check_fits

    cpus = int(ray.cluster_resources()["CPU"])
    with pytest.raises(AutoRLError, match=rf"^the Ray cluster has {cpus} CPUs and the run needs {cpus + 1} at once"):
        check_fits(ClusterConfig(ray="local", trainer_workers=cpus), ray.cluster_resources(), with_judge=False)
