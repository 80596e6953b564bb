"""The rest of ART's names as ART's examples and docs use them: module paths (`art.local.backend`, `art.types`,
`art.utils.*`), `art.trajectory_group_batches`, `Trajectory.finish` / `additional_histories` (trained), ART's LoRA
and expert settings set at or after construction, `LocalBackend(in_process=...)`, RULER on a single conversation
and its explanation as ART logs it, and the names autorl does not have: one `NotInAutoRLError` line each saying
what to use instead, never an AttributeError."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

import autorl as art
from autorl.config import TrainConfig, TrainerConfig
from autorl.errors import AutoRLError, NotInAutoRLError, UnsupportedArgumentError
from autorl.training.trainer import GRPOTrainer
from autorl.trajectories import History
from tests.helpers.chat_server import FakeOpenAIServer
from tests.helpers.judge_server import scores_json
from tests.helpers.tiny import choice


def run(coroutine):
    return asyncio.run(coroutine)


def test_art_s_module_paths_and_utilities_resolve():
    from autorl.local.backend import LocalBackend
    from autorl.types import LocalTrainResult, TrainConfig, TrainResult, TrainSFTConfig
    from autorl.utils import get_trajectory_messages, limit_concurrency
    from autorl.utils.sft import create_sft_dataset_iterator, iterate_file

    assert LocalBackend is art.LocalBackend and TrainConfig is art.TrainConfig and LocalTrainResult is TrainResult
    assert TrainSFTConfig is art.TrainSFTConfig and art.utils.sft.iterate_file is iterate_file
    assert create_sft_dataset_iterator and art.trajectory_group_batches
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}, choice("yes")])
    assert get_trajectory_messages(trajectory) == [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}
    ]  # fmt: skip
    assert art.utils.limit_concurrency is limit_concurrency
    assert LocalBackend(".unused", in_process=True).in_process  # ART's keyword, accepted


def test_limit_concurrency_lets_n_calls_run_at_once_per_key():
    running, peak = {"a": 0, "b": 0}, {"a": 0, "b": 0}

    @art.utils.limit_concurrency(2, derive_key=lambda key, _: key)
    async def call(key: str, index: int) -> int:
        running[key] += 1
        peak[key] = max(peak[key], running[key])
        await asyncio.sleep(0.01)
        running[key] -= 1
        return index

    async def many() -> list[int]:
        return await asyncio.gather(*(call("ab"[i % 2], i) for i in range(8)))

    assert run(many()) == list(range(8)) and peak == {"a": 2, "b": 2}


def test_trajectory_group_batches_yields_batches_as_groups_finish_and_skips_done_batches():
    finished: dict[int, asyncio.Event] = {}  # group i's rollouts finish once group i + 1's have: 4 first, 0 last
    returned: Counter[int] = Counter()

    async def rollout(index: int) -> art.Trajectory:
        if index + 1 in finished:
            await finished[index + 1].wait()
            await asyncio.sleep(0.02)  # the batcher takes in the group that finished before this one
        returned[index] += 1
        if returned[index] == 2:
            finished[index].set()
        return art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}], reward=index)

    def group(index: int) -> art.TrajectoryGroup:
        return art.TrajectoryGroup(rollout(index) for _ in range(2))

    async def batches(skip: int) -> list[list[float]]:
        finished.clear()
        finished.update({i: asyncio.Event() for i in range(2 * skip, 5)})  # skipped groups never run
        returned.clear()
        found = []
        async for batch in art.trajectory_group_batches((group(i) for i in range(5)), batch_size=2, skip_batches=skip):
            found.append([g.trajectories[0].reward for g in batch])
        return found

    assert run(batches(0)) == [[4, 3], [2, 1], [0]]  # the fastest groups first
    assert run(batches(1)) == [[4, 3], [2]]  # the first batch's groups (0, 1) not run

    async def failing() -> art.Trajectory:
        raise ValueError("rollout broke")

    async def broken() -> None:
        async for _ in art.trajectory_group_batches([art.TrajectoryGroup([failing()])], batch_size=1):
            pass

    with pytest.raises(ValueError, match="rollout broke"):
        run(broken())


def test_finish_records_the_duration_and_additional_histories_are_trained(tiny_model, tmp_path, tokenizer):
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}])
    time.sleep(0.01)
    assert trajectory.finish() is trajectory and trajectory.metrics["duration"] >= 0.01
    assert "start_time" not in trajectory.model_dump_json()  # not saved, as ART's

    def rollout(reward: float, histories: int) -> art.Trajectory:
        ids = tokenizer.encode(" yes no" * (1 + int(reward)), add_special_tokens=False)
        sub = History(
            messages_and_choices=[{"role": "user", "content": "sub"}, choice("the a", tokenizer.encode("the a"))]
        )
        return art.Trajectory(
            messages_and_choices=[{"role": "user", "content": "q"}, choice(tokenizer.decode(ids), ids)],
            additional_histories=[sub] * histories,
            reward=reward,
        )

    trainer = GRPOTrainer(tiny_model, tmp_path / "c", TrainerConfig(dtype="float32"))
    config = TrainConfig(learning_rate=1e-9)
    plain = trainer.step([art.TrajectoryGroup([rollout(0, 0), rollout(1, 0)])], config)
    with_histories = trainer.step([art.TrajectoryGroup([rollout(0, 1), rollout(1, 1)])], config)
    assert with_histories["trained_tokens"] == plain["trained_tokens"] + 2 * len(tokenizer.encode("the a"))
    saved = art.Trajectory.model_validate_json(rollout(1, 1).model_dump_json())
    assert isinstance(saved.additional_histories[0].messages_and_choices[1], type(choice("x")))  # a Choice again


def test_art_s_lora_and_internal_config_set_after_construction_reach_the_trainer_and_server():
    model = art.TrainableModel(
        name="agent", lora_config=art.dev.LoRAConfig(rank=16, alpha=32, target_modules=["q_proj"])
    )
    assert (model.trainer.lora_rank, model.trainer.lora_alpha, model.trainer.target_modules) == (16, 32, ["q_proj"])
    with pytest.raises(UnsupportedArgumentError, match="lora_config: autorl has no setting 'rnk'"):
        art.TrainableModel(name="agent", lora_config={"rnk": 16})
    later = art.TrainableModel(name="agent", server={"max_num_seqs": 4})
    later._internal_config = art.dev.InternalModelConfig(
        engine_args=art.dev.EngineArgs(max_model_len=4096, max_num_seqs=8), lora_config={"rank": 4}
    )
    assert later.server == {"max_model_len": 4096, "max_num_seqs": 4} and later.trainer.lora_rank == 4
    assert later._internal_config["lora_config"] == {"rank": 4}

    class Attached:
        async def register(self, model):
            pass

    run(later.register(Attached()))
    with pytest.raises(AutoRLError, match=r"set _internal_config before `await model\.register"):
        later._internal_config = {"engine_args": {"max_model_len": 8192}}


def test_ruler_scores_a_single_conversation_and_logs_its_explanation_as_art_does():
    judge = FakeOpenAIServer(lambda body: [scores_json(_1=0.7)])
    try:
        conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        scores = run(art.rewards.ruler([conversation], f"judge@{judge.base_url}", cache_dir=None))
        assert [s.score for s in scores] == [0.7]
        group = art.TrajectoryGroup([art.Trajectory(messages_and_choices=conversation)])
        scored = run(art.rewards.ruler_score_group(group, f"judge@{judge.base_url}", cache_dir=None))
        assert scored.trajectories[0].logs[0].startswith("RULER explanation: ")
    finally:
        judge.close()


@pytest.mark.parametrize(
    ("get", "says"),
    [
        (lambda: art.TinkerBackend, "autorl.TinkerBackend: see `autorl.tinker`"),
        (lambda: art.dev.TinkerArgs, "autorl.dev.TinkerArgs: autorl has no Tinker backend"),
        (lambda: art.dev.TinkerTrainingClientArgs, "autorl.dev.TinkerTrainingClientArgs: autorl has no Tinker"),
        (lambda: art.tinker.TinkerBackend, "autorl.tinker.TinkerBackend: autorl has no Tinker backend"),
        (lambda: art.skypilot.SkyPilotBackend, "autorl.skypilot.SkyPilotBackend: autorl has no SkyPilot backend"),
    ],
)
def test_an_art_name_autorl_does_not_have_is_one_line_saying_what_to_use(get, says):
    with pytest.raises(NotInAutoRLError, match=says.replace("(", r"\(").replace(")", r"\)")) as raised:
        get()
    assert not isinstance(raised.value, AttributeError) and "\n" not in str(raised.value)


def test_importing_a_refused_name_is_the_same_line():
    with pytest.raises(NotInAutoRLError, match="SkyPilotBackend"):
        from autorl.skypilot import SkyPilotBackend  # noqa: F401
    with pytest.raises(AttributeError):  # a name ART does not have either stays an AttributeError
        art.skypilot.no_such_name  # noqa: B018


ART_ALL = [
    "dev", "current_trajectory", "no_capture", "gather_trajectories", "gather_trajectory_groups",
    "trajectory_group_batches", "Backend", "LocalTrainResult", "LoRAConfig", "LocalServingUnavailableError",
    "MegatronRuntimeConfig", "MegatronTopologyConfig", "MetricDefinition", "PipelineAutotuneConfig",
    "PipelineRuntimeConfig", "PIPELINE_RL_DASHBOARD_DEFAULT_METRICS", "PIPELINE_RL_METRIC_DEFINITIONS",
    "PIPELINE_RL_SCORE_METRICS", "get_megatron_runtime_config", "init_megatron_runtime_config", "ServerlessBackend",
    "ServerlessTrainResult", "Messages", "MessagesAndChoices", "Tools", "Model", "TrainableModel", "retry",
    "TrainSFTConfig", "TrainConfig", "TrainResult", "Trajectory", "TrajectoryGroup", "trajectory", "trajectory_group",
    "capture_yielded_trajectory", "yield_trajectory",
    "auto_trajectory", "capture_auto_trajectory", "LocalBackend", "TinkerBackend",  # in ART's __all__ of 2025
]  # fmt: skip
"""`__all__` of ART's `src/art/__init__.py` (2026), and the names its 2025 `__all__` had besides."""
REFUSED = {"MegatronRuntimeConfig", "MegatronTopologyConfig", "get_megatron_runtime_config", "init_megatron_runtime_config", "TinkerBackend"}  # fmt: skip


@pytest.mark.parametrize("name", ART_ALL)
def test_every_name_of_art_s_all_is_answered_or_refused_in_one_line(name):
    if name not in REFUSED:
        assert getattr(art, name) is not None
        return
    with pytest.raises(NotInAutoRLError, match=f"^autorl.{name}: see `autorl.(megatron|tinker)`: ") as raised:
        getattr(art, name)
    assert "\n" not in str(raised.value)


def test_art_s_2026_config_names_map_onto_autorl_s_settings():
    from autorl.errors import FatalError, ServerDiedError
    from autorl.pipeline_trainer import PipelineTrainer

    model = art.TrainableModel(name="agent", lora_config=art.LoRAConfig(rank=4, alpha=8, dropout=0.1))
    assert (model.trainer.lora_rank, model.trainer.lora_alpha, model.trainer.lora_dropout) == (4, 8, 0.1)
    assert art.LocalTrainResult is art.ServerlessTrainResult is art.TrainResult
    assert art.LocalServingUnavailableError is ServerDiedError and issubclass(ServerDiedError, FatalError)

    def trainer(**kwargs) -> PipelineTrainer:
        return PipelineTrainer(model, None, None, [], None, num_rollout_workers=9, **kwargs)

    sizes = art.PipelineRuntimeConfig(num_rollout_workers=3, min_batch_size=2, max_batch_size=5, max_steps_off_policy=0)
    made = trainer(pipeline=sizes, autotune=art.PipelineAutotuneConfig(window_steps=4))  # ART's fields, mode off
    assert (made.num_rollout_workers, made.min_batch_size, made.max_batch_size, made.claim_limit) == (3, 2, 5, 5)
    assert trainer().num_rollout_workers == 9
    with pytest.raises(UnsupportedArgumentError, match="autotune mode 'online': autorl has no autotuner"):
        trainer(autotune=art.PipelineAutotuneConfig(mode="online"))
    with pytest.raises(ValueError, match="max_batch_size must be >= min_batch_size"):
        art.PipelineRuntimeConfig(min_batch_size=4, max_batch_size=2)
    assert art.PIPELINE_RL_SCORE_METRICS == () and "staleness/mean" in art.PIPELINE_RL_DASHBOARD_DEFAULT_METRICS
    with pytest.raises(NotInAutoRLError, match=r"autorl\.megatron\.MegatronBackend: autorl has no Megatron trainer"):
        art.megatron.MegatronBackend  # noqa: B018
    with pytest.raises(NotInAutoRLError, match=r"autorl\.TinkerNativeBackend: see `autorl\.tinker`"):
        art.TinkerNativeBackend  # noqa: B018
