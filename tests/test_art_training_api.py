"""ART's backend-first training API (ART 2026): `result = await backend.train(model, groups, learning_rate=...)`
with ART's keywords mapped onto autorl's `TrainConfig`, a `TrainResult(step, metrics, checkpoint_path)` on the
local, remote and cluster backends, `model.train(...)` (older ART code) on the same path, and
`model.log(metrics=result.metrics, step=result.step)` with no trajectories.

The local backend trains for real on the tiny model, served by a scripted OpenAI endpoint in place of vLLM
(`ScriptedPlacement`); the remote one is `autorl serve`'s app over such a backend (tests/test_remote_backend.py's
harness); the cluster one trains in a Ray actor of a local cluster, in a subprocess (Ray stays initialised in the
process that connected)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import autorl as art
from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history
from autorl.dev import train_keywords
from autorl.errors import UnsupportedArgumentError
from autorl.types import TrainResult
from tests.helpers.limits import scaled
from tests.helpers.remote import TOKEN, trainable
from tests.helpers.training import groups, local_backend


def test_art_s_keywords_map_onto_train_config_fields():
    config, verbose, saved = train_keywords(
        None,
        {
            "learning_rate": 1e-5, "epsilon": 0.1, "epsilon_high": 0.3, "scale_rewards": False,
            "kl_penalty_coef": 0.05, "allow_training_without_logprobs": True, "precalculate_logprobs": True,
            "packed_sequence_length": None, "advantage_balance": 0.0, "verbose": True, "save_checkpoint": True,
        },
    )  # fmt: skip
    assert (config.learning_rate, config.epsilon, config.epsilon_high) == (1e-5, 0.1, 0.3)
    assert (config.importance_sampling_correction, config.importance_sampling_cap) == (True, None)  # precalculated
    assert (config.scale_rewards, config.kl_beta, config.loss, verbose, saved) == ("none", 0.05, "grpo", True, True)
    sequence = train_keywords(None, {"importance_sampling_level": "sequence"})[0]
    assert (sequence.loss, sequence.importance_sampling_level) == ("grpo", "sequence")  # the ratio's level alone
    cispo = train_keywords(art.TrainConfig(learning_rate=2e-5), {"loss_fn": "cispo", "epsilon": None})[0]
    assert (cispo.loss, cispo.learning_rate, cispo.epsilon) == ("cispo", 2e-5, 1.0)  # epsilon None: the loss's
    assert train_keywords(None, {"normalize_advantages": False})[0].scale_rewards == "none"
    assert train_keywords(None, {"loss": "dr_grpo", "ppo_epochs": 2})[0].ppo_epochs == 2  # autorl's own fields


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"lerning_rate": 1e-5}, r"backend.train\(\) got an unexpected keyword argument .lerning_rate."),
        ({"adam_params": object()}, r"backend.train\(adam_params=...\): autorl has no such setting"),
        ({"kl_penalty_source": "sample"}, r"kl_penalty_source='sample' cannot apply"),
        ({"importance_sampling_level": "arithmetic"}, r"backend.train\(importance_sampling_level=...\): Input should"),
        ({"loss_fn": "dpo"}, r"loss_fn='dpo'\): autorl has \['cispo', 'ppo'\]"),
        ({"learning_rate": -1.0}, r"backend.train\(learning_rate=...\): Input should be greater than 0"),
    ],
)
def test_a_keyword_autorl_cannot_honour_is_one_type_error_line_naming_it(keywords, message):
    with pytest.raises(UnsupportedArgumentError, match=message) as raised:
        train_keywords(None, keywords)
    assert isinstance(raised.value, TypeError) and "\n" not in str(raised.value)


def test_art_s_train_config_names_set_autorl_s_fields_and_an_unknown_one_is_an_error():
    assert art.TrainConfig(beta=0.1).kl_beta == 0.1  # ART's KL field before 2026
    assert art.TrainConfig(kl_penalty_coef=0.2, optimizer_save_interval=3).kl_beta == 0.2
    assert art.types.TrainConfig is art.TrainConfig
    with pytest.raises(ValueError, match="betta"):
        art.TrainConfig(betta=0.1)
    with pytest.raises(ValueError, match="kl_penalty_source='sample'"):
        art.TrainConfig(kl_penalty_source="sample")


def test_backend_train_on_the_local_backend_returns_a_train_result_and_log_records_its_metrics(
    tmp_path,
    tiny_model,
    chat,
    caplog,
):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    backend = local_backend(tmp_path, chat)
    model = trainable(tiny_model)

    async def program() -> tuple[TrainResult, dict, dict]:
        await model.register(backend)
        result = await backend.train(model, groups(tokenizer), learning_rate=1e-9, scale_rewards=True, verbose=True)
        logged = await model.log(metrics=result.metrics, step=result.step, split="train")
        with_tools = groups(tokenizer)
        for trajectory in (t for g in with_tools for t in g.trajectories):
            trajectory.metrics.update(tool_calls_parsed=1, tool_calls_recovered=0, tool_calls_invalid=2)
        older = await model.train(with_tools, config=art.TrainConfig(learning_rate=1e-9))  # older ART code
        return result, logged, older

    with caplog.at_level(logging.INFO, logger="autorl"):
        result, logged, older = asyncio.run(program())
    backend.close()
    run_dir = backend.run_dir(model)
    assert isinstance(result, TrainResult) and result.step == 1 and "step" not in result.metrics
    assert result.checkpoint_path == str(run_dir / "checkpoints" / "0001")
    assert Path(result.checkpoint_path, "adapter_model.safetensors").is_file()
    assert result.metrics["trained_tokens"] > 0 and "loss" in result.metrics
    assert "trained step 1" in caplog.text  # verbose
    assert logged == result.metrics  # metrics alone: nothing computed from trajectories beside them
    record = read_history(run_dir, LOG_HISTORY_FILE)[0]
    assert record["step"] == 1 and record["split"] == "train" and record["train/loss"] == result.metrics["loss"]
    assert not (run_dir / "trajectories").exists()  # no trajectories, no parquet
    history = read_history(run_dir)
    assert older["step"] == 2 and [h["step"] for h in history] == [1, 2]
    assert "tool_calls_parsed" not in history[0]  # rollouts without tools
    assert [history[1][f"tool_calls_{how}"] for how in ("parsed", "recovered", "invalid")] == [8, 0, 16]  # summed


def test_backend_train_on_the_remote_backend_maps_the_keywords_in_the_client(served, tiny_model, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    plain = art.RemoteBackend(served.url, api_key=TOKEN)
    mirrored = art.RemoteBackend(served.url, api_key=TOKEN, mirror=tmp_path / "mirror")

    async def program() -> tuple[TrainResult, TrainResult, dict]:
        model = trainable(tiny_model)
        await model.register(plain)
        first = await plain.train(model, groups(tokenizer), learning_rate=1e-9, kl_penalty_coef=0.01)
        plain.close()
        await model.register(mirrored)
        second = await mirrored.train(model, groups(tokenizer), learning_rate=1e-9)
        logged = await model.log(metrics={"custom": 1.5}, step=second.step)
        with pytest.raises(UnsupportedArgumentError, match="packed_sequence_length"):  # refused before any request
            await mirrored.train(model, groups(tokenizer), packed_sequence_length=4096)
        return first, second, logged

    first, second, logged = asyncio.run(program())
    mirrored.close()
    assert (first.step, second.step) == (1, 2) and first.checkpoint_path is None  # on the server only
    assert "kl" in first.metrics  # the server trained with the mapped kl_beta
    assert second.checkpoint_path == str(tmp_path / "mirror" / "remote" / "agent" / "checkpoints" / "0002")
    assert Path(second.checkpoint_path, "adapter_config.json").is_file()
    assert logged == {"custom": 1.5}
    there = served.served.backend.run_dir(trainable(tiny_model))
    assert [(r["step"], r["val/custom"]) for r in read_history(there, LOG_HISTORY_FILE)] == [(2, 1.5)]


CLUSTER_PROGRAM = """
import asyncio, json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})  # the repository root: its tests.helpers package
from tests.helpers.chat_server import ChatCompletionServer, completion
from tests.helpers.remote import ScriptedServing
from tests.helpers.training import groups
from transformers import AutoTokenizer
import autorl as art
from autorl.backends.cluster.backend import ClusterBackend, ClusterPlacement
from autorl.backends.cluster.config import ClusterConfig
from autorl.config import TrainerConfig

class ScriptedReplicas(ClusterPlacement):
    async def start_serving(self, model, run_dir):
        return ScriptedServing(chat.base_url, run_dir)

chat = ChatCompletionServer(lambda body: completion(body, "hello"))
cluster = ClusterConfig(ray="local", replicas=1, trainer_cpus=1)
backend = ClusterBackend({home!r}, cluster=cluster)
backend.placement = ScriptedReplicas(cluster, backend.server_config)
model = art.TrainableModel(name="agent", project="cluster", base_model={model!r},
                           trainer=TrainerConfig(dtype="float32"))

SFT = [art.Trajectory(messages_and_choices=[{{"role": "user", "content": "hi"}}, {{"role": "assistant", "content": "yes"}}])]

async def program():
    await model.register(backend)
    rl = await backend.train(model, groups(AutoTokenizer.from_pretrained({model!r})), learning_rate=1e-9)
    sft = await model.train_sft(SFT, art.TrainSFTConfig(learning_rate=1e-3))
    return rl, sft

results = asyncio.run(program())
backend.close()
chat.close()
print(json.dumps([{{"step": r.step, "metrics": r.metrics, "checkpoint_path": r.checkpoint_path}} for r in results]))
"""


@pytest.mark.timeout(240)  # a local Ray cluster's start and a trainer actor's first step on 2 cores
def test_train_and_train_sft_on_the_cluster_backend_return_train_results_from_its_trainer_actor(tmp_path, tiny_model):
    pytest.importorskip("ray")
    script = CLUSTER_PROGRAM.format(
        repo=str(Path(__file__).resolve().parents[1]), home=str(tmp_path), model=str(tiny_model)
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(220))
    assert done.returncode == 0, done.stderr[-3000:]
    result, sft = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["step"] == 1 and result["metrics"]["trained_tokens"] > 0 and "step" not in result["metrics"]
    assert result["checkpoint_path"] == str(tmp_path / "cluster" / "models" / "agent" / "checkpoints" / "0001")
    assert Path(result["checkpoint_path"], "adapter_model.safetensors").is_file()
    assert sft["step"] == 2 and sft["metrics"]["sft"] == 1.0 and sft["metrics"]["trained_tokens"] > 0  # SFT too
    assert Path(sft["checkpoint_path"], "adapter_model.safetensors").is_file()
