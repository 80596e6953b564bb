"""ART's client names beyond the core, each as ART's code calls it: `art.retry`, `art.utils.iterate_dataset`,
`art.gather_trajectories`, `art.rewards` (ART's argument order), `Model.litellm_completion_params`, a model's
own `config`, and ART's expert settings (`_internal_config`, `_config`) mapped onto autorl's configs."""

from __future__ import annotations

import asyncio
import importlib
import logging
import random
from types import SimpleNamespace
from typing import get_type_hints

import pytest
from pydantic import BaseModel, ConfigDict

import autorl as art
from autorl.backends.base import TrainingCalls
from autorl.backends.local import LocalBackend, LocalPlacement
from autorl.errors import AutoRLError
from autorl.serving.config import ServerConfig
from ruler import FunctionJudge, JudgeModel
from ruler.errors import JudgeSpecError
from tests.helpers.chat_server import FakeOpenAIServer
from tests.helpers.judge_server import scores_json


def run(coroutine):
    return asyncio.run(coroutine)


class Flaky:
    """Raises `error` the first `failures` calls, then returns the call count."""

    def __init__(self, failures: int, error: type[Exception] = ValueError):
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return self.calls


def test_retry_calls_a_sync_function_again_with_exponential_backoff(monkeypatch):
    waits = []
    module = importlib.import_module("autorl.utils.retry")  # `autorl.utils.retry` is the function, as in ART
    monkeypatch.setattr(module, "time", SimpleNamespace(sleep=waits.append))
    flaky = Flaky(2)
    assert art.retry(max_attempts=3, delay=0.5, backoff_factor=3)(flaky)() == 3
    assert waits == [0.5, 1.5]

    seen = []
    always = Flaky(5)
    with pytest.raises(ValueError, match="failure 3"):  # the last attempt's exception propagates
        art.retry(max_attempts=3, delay=0, on_retry=lambda exc, attempt: seen.append((str(exc), attempt)))(always)()
    assert always.calls == 3 and seen == [("failure 1", 1), ("failure 2", 2)]

    other = Flaky(1, KeyError)
    with pytest.raises(KeyError):  # not one of `exceptions`: no second call
        art.retry(exceptions=(ValueError,), delay=0)(other)()
    assert other.calls == 1


def test_retry_on_an_async_rollout_awaits_between_attempts(caplog):
    calls = 0

    @art.retry(exceptions=(TimeoutError,), delay=0.01)
    async def rollout(scenario: int) -> art.Trajectory:
        """A rollout whose first call times out."""
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TimeoutError("slow")
        return art.Trajectory(messages_and_choices=[{"role": "user", "content": str(scenario)}], reward=1)

    with caplog.at_level(logging.WARNING, logger="autorl"):
        trajectory = run(rollout(7))
    assert trajectory.messages()[0]["content"] == "7" and calls == 2
    assert "retry 1/3 of rollout after TimeoutError: slow" in caplog.text
    assert rollout.__name__ == "rollout" and asyncio.iscoroutinefunction(rollout)
    hints = get_type_hints(rollout.__wrapped__)  # ART's aliases work as annotations
    assert hints["return"] is art.Trajectory
    with pytest.raises(ValueError, match="max_attempts"):
        art.retry(max_attempts=0)


def test_iterate_dataset_gives_arts_batches_epoch_after_epoch_and_resumes_at_a_step():
    from autorl.utils import iterate_dataset

    data = list(range(7))
    batches = list(iterate_dataset(data, groups_per_step=3, num_epochs=2, use_tqdm=False))
    assert [b.step for b in batches] == [0, 1, 2, 3, 4, 5]
    assert [(b.epoch, b.epoch_step) for b in batches] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    for epoch in (0, 1):  # ART's order: the epoch's seed shuffles the indices
        order = list(range(7))
        random.seed(epoch)
        random.shuffle(order)
        assert [i for b in batches if b.epoch == epoch for i in b.items] == order
    assert len(batches[2].items) == 1  # the epoch's last batch takes what is left
    resumed = list(iterate_dataset(data, groups_per_step=3, num_epochs=2, initial_step=4, use_tqdm=False))
    assert resumed == batches[4:]
    items, epoch, step, epoch_step = resumed[0]  # ART's older tuple form
    assert (items, epoch, step, epoch_step) == (batches[4].items, 1, 4, 1)
    assert list(iterate_dataset([], use_tqdm=False)) == []
    state = random.getstate()
    list(iterate_dataset(data, use_tqdm=False))
    assert random.getstate() == state  # the global random is left alone


def test_gather_trajectories_keeps_failures_in_place_up_to_the_limit():
    async def rollout(i: int) -> art.Trajectory:
        if i == 1:
            raise RuntimeError("lost")
        return art.Trajectory(messages_and_choices=[], reward=i)

    results = run(art.gather_trajectories((rollout(i) for i in range(3)), pbar_desc=None, max_exceptions=1))
    assert [r.reward if isinstance(r, art.Trajectory) else repr(r) for r in results] == [0, "RuntimeError('lost')", 2]
    with pytest.raises(RuntimeError, match="lost"):
        run(art.gather_trajectories((rollout(i) for i in range(3)), pbar_desc=None))


def test_art_s_module_paths_resolve_to_autorl_s_objects():
    from autorl.local import LocalBackend as ArtLocalBackend
    from autorl.rewards import DEFAULT_RUBRIC, ruler_score_group
    from autorl.utils import iterate_dataset, retry

    assert ArtLocalBackend is art.LocalBackend and retry is art.retry
    assert iterate_dataset is art.utils.iterate_dataset and DEFAULT_RUBRIC
    assert ruler_score_group is art.rewards.ruler_score_group
    assert art.dev.InternalModelConfig(engine_args=art.dev.EngineArgs(max_model_len=4096)) == {
        "engine_args": {"max_model_len": 4096}
    }


def test_rewards_take_arts_argument_order_and_litellm_params(tmp_path):
    judge = FakeOpenAIServer(lambda body: [scores_json(_1=0.2, _2=0.9)])
    try:
        group = art.TrajectoryGroup(
            art.Trajectory(
                messages_and_choices=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": a}]
            )
            for a in ("no", "yes")
        )
        params = {"temperature": 0.3, "max_tokens": 300, "top_p": 0.5}
        scored = run(
            art.rewards.ruler_score_group(group, f"judge@{judge.base_url}", params, "Prefer yes.", cache_dir=None)
        )
        assert [t.reward for t in scored] == [0.2, 0.9]
        request = judge.requests[0]
        assert (request["temperature"], request["max_tokens"], request["top_p"]) == (0.3, 300, 0.5)
        assert "Prefer yes." in str(request["messages"])  # the rubric, fourth as in ART
    finally:
        judge.close()
    made = art.rewards.judge_with_params("openai/gpt-4.1-mini", {"api_base": "http://127.0.0.1:9/v1", "seed": 1})
    assert (
        isinstance(made, JudgeModel) and made.base_url == "http://127.0.0.1:9/v1" and made.extra_params == {"seed": 1}
    )
    with pytest.raises(JudgeSpecError, match="credentials"):
        art.rewards.judge_with_params("openai/gpt-4.1-mini", {"api_key": "sk-x"})
    with pytest.raises(JudgeSpecError, match="no model"):
        art.rewards.judge_with_params(FunctionJudge(len), {"temperature": 0})


def test_litellm_completion_params_reach_the_model_through_litellm():
    from ruler.endpoint import import_litellm

    server = FakeOpenAIServer(lambda body: ["pong"])
    try:
        api = art.Model(name="gpt-x", inference_base_url=server.base_url, inference_api_key="k")
        assert api.litellm_completion_params() == {
            "model": "gpt-x", "base_url": server.base_url, "api_key": "k", "temperature": 1,
        }  # fmt: skip
        policy = art.TrainableModel(name="agent", inference_base_url=server.base_url, inference_model_name="agent@0002")
        params = policy.litellm_completion_params()
        assert params["model"] == "hosted_vllm/agent@0002" and policy.litellm_completion_params(step=2) == params
        reply = run(import_litellm().acompletion(messages=[{"role": "user", "content": "ping"}], **params))
        assert reply.choices[0].message.content == "pong"
        assert server.requests[0]["model"] == "agent@0002" and server.requests[0]["temperature"] == 1
        with pytest.raises(AutoRLError, match="serves 'agent@0002', not checkpoint 0001"):
            policy.litellm_completion_params(step=1)
    finally:
        server.close()


class GameConfig(BaseModel):
    max_turns: int = 3
    board: list[str] = ["a", "b"]


class Unwritable(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    callback: object = object()


def test_a_model_keeps_the_user_s_own_config_and_refuses_one_that_is_no_json():
    model: art.TrainableModel[GameConfig] = art.TrainableModel[GameConfig](name="agent", config=GameConfig(max_turns=5))
    assert model.config == GameConfig(max_turns=5) and model.model_dump()["config"]["max_turns"] == 5
    plain = art.Model(name="judge", config=GameConfig())
    run(plain.register(LocalBackend(".unused")))  # a plain model only attaches (its log needs the backend)
    with pytest.raises(AutoRLError, match="config cannot be written as JSON"):
        run(art.Model(name="x", config=Unwritable()).register(LocalBackend(".unused")))


def test_internal_config_lands_on_the_server_and_trainer_configs_and_names_what_it_ignores(caplog, monkeypatch):
    monkeypatch.setattr("autorl.serving.config.cuda_available", lambda: False)
    internal = art.dev.InternalModelConfig(
        init_args=art.dev.InitArgs(max_seq_length=4096, load_in_4bit=True),
        engine_args=art.dev.EngineArgs(gpu_memory_utilization=0.7, max_num_seqs=8, enforce_eager=True),
        peft_args=art.dev.PeftArgs(r=16, lora_alpha=32, random_state=7),
        trainer_args=art.dev.TrainerArgs(learning_rate=1e-5),
    )
    with caplog.at_level(logging.WARNING, logger="autorl"):
        model = art.TrainableModel(name="agent", base_model="embedded:smollm2-135m", _internal_config=internal)
    assert model.server == {"max_model_len": 4096, "max_num_seqs": 8, "enforce_eager": True}  # GPU share: CUDA only
    assert (model.trainer.lora_rank, model.trainer.lora_alpha, model.trainer.seed) == (16, 32, 7)
    assert model._internal_config == internal
    warning = [r.message for r in caplog.records if "_internal_config" in r.message]
    assert len(warning) == 1, warning
    for name in ("init_args.load_in_4bit", "trainer_args.learning_rate", "gpu_memory_"):
        assert name in warning[0]
    config = LocalPlacement(ServerConfig(max_lora_rank=16)).server_config.with_overrides(model.server)
    assert (config.max_model_len, config.max_num_seqs, config.max_lora_rank) == (4096, 8, 16)
    monkeypatch.setattr("autorl.serving.config.cuda_available", lambda: True)
    on_gpu = art.TrainableModel(name="agent", _internal_config={"engine_args": {"gpu_memory_utilization": 0.7}})
    assert on_gpu.server == {"gpu_memory_utilization": 0.7}
    with pytest.raises(ValueError, match="'max_len' is not a ServerConfig field"):
        art.TrainableModel(name="agent", server={"max_len": 1})


class RecordingBackend(TrainingCalls):
    """Answers a step with the config it was given: the edge of a test of the client's own mapping."""

    async def register(self, model):
        pass

    async def train_step(self, model, groups, config):
        return {"step": 1, "config": config}

    def checkpoint_path(self, model, step):
        return None


def test_train_takes_art_s_keywords_and_maps_its_expert_config(caplog):
    model = art.TrainableModel(name="agent")
    run(model.register(RecordingBackend()))
    config = art.TrainConfig(learning_rate=1e-5)
    with caplog.at_level(logging.INFO, logger="autorl"):
        metrics = run(model.train([], config, _config={"epsilon": 0.1, "epsilon_high": 0.3}, verbose=True))
    assert (metrics["config"].learning_rate, metrics["config"].epsilon, metrics["config"].epsilon_high) == (
        1e-5, 0.1, 0.3,
    )  # fmt: skip
    assert "trained step 1" in caplog.text
    sequence = run(model.train([], _config=art.dev.TrainConfig(importance_sampling_level="sequence")))["config"]
    assert (sequence.loss, sequence.importance_sampling_level) == ("grpo", "sequence")  # ART's ratio level
    ppo = run(model.train([], _config={"allow_training_without_logprobs": True, "ppo": True}))["config"]
    assert (ppo.loss, ppo.epsilon, ppo.epsilon_high) == ("grpo", 0.2, None)  # ART's PPO: epsilon_high = epsilon
    with pytest.raises(AutoRLError, match="unknown key 'epsilonn'"):
        run(model.train([], _config={"epsilonn": 0.1}))
