"""`autorl.PipelineTrainer` (ART's asynchronous pipeline) and the off-policy correction of the loss.

The pipeline runs for real on the tiny model: a `LocalBackend` whose trainer is real and whose serving is a
scripted OpenAI endpoint in place of vLLM (tests/test_remote_backend.py's `ScriptedPlacement`), answering with
sampled token ids and logprobs as our vLLM server does. The truncated importance weights are checked against
their formula on fixed tensors. The train stage runs on it too, `--async` and synchronous: its records and its
spans (each step's and its update's, in OpenTelemetry's in-memory exporter)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
from collections import Counter

import pytest
import torch
from rich.console import Console

import autorl as art
from autorl import tracing
from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history
from autorl.config import TrainConfig
from autorl.pipeline_state import STATE_FILE
from autorl.pipeline_trainer import PipelineTrainer
from autorl.serving.config import ServerConfig
from autorl.tracking import Tracker
from autorl.training.loss import clipped_policy_loss
from autorl.training.sequences import TOKEN_ID_PREFIX
from pipelines.config import RunConfig
from pipelines.policy import Policy
from pipelines.records.step_costs import STEP_COST
from pipelines.records.train import validated_steps
from pipelines.stage_context import StageContext
from pipelines.stages import train
from pipelines.stages.train import train_pipelined
from pipelines.steps import bookkeeping
from ruler import FunctionJudge
from tests.helpers.chat_server import ChatCompletionServer
from tests.helpers.pipeline import TASK, upstream_artifacts
from tests.helpers.remote import ScriptedPlacement, trainable

REQUESTS = itertools.count()


def sampled(body: dict) -> dict:
    """A chat completion of `n` choices, each a few random token ids with their logprobs (vLLM's `token_id:N`)."""
    rng = random.Random(next(REQUESTS))  # each request its own answers, as sampling gives
    choices = []
    for index in range(body.get("n", 1)):
        ids = [rng.randrange(3, 300) for _ in range(rng.randrange(3, 7))]
        content = [{"token": f"{TOKEN_ID_PREFIX}{i}", "logprob": -rng.uniform(1, 4), "bytes": None, "top_logprobs": []}
                   for i in ids]  # fmt: skip
        choices.append({
            "index": index, "finish_reason": "stop", "logprobs": {"content": content},
            "message": {"role": "assistant", "content": " ".join(map(str, ids))},
        })  # fmt: skip
    return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": choices}


@pytest.fixture
def chat():
    server = ChatCompletionServer(sampled)
    yield server
    server.close()


@pytest.fixture
def model(tmp_path, tiny_model, chat):
    """The tiny model, registered on a local backend with a real trainer and the scripted server."""
    config = ServerConfig(lora_serving="adapter")
    backend = art.LocalBackend(tmp_path / "runs", server=config)
    backend.placement = ScriptedPlacement(chat, config)
    model = trainable(tiny_model)
    asyncio.run(model.register(backend))
    yield model
    backend.close()


async def rollout(model: art.TrainableModel, scenario: str, config: None) -> art.TrajectoryGroup:
    """ART's rollout function: 4 answers to the scenario in one request; a "tie" scenario's rewards tie."""
    messages: art.Messages = [{"role": "user", "content": scenario}]
    response = await model.openai_client().chat.completions.create(
        messages=messages, model=model.get_inference_name(), n=4, logprobs=True
    )
    return art.TrajectoryGroup(
        art.Trajectory(messages_and_choices=[*messages, choice], reward=0.0 if scenario == "tie" else choice.index)
        for choice in response.choices
    )


def history(model: art.TrainableModel) -> list[dict]:
    return [r for r in read_history(model._backend.run_dir(model), LOG_HISTORY_FILE) if r["split"] == "train"]


def test_the_truncated_importance_weight_is_min_of_the_ratio_to_the_sampler_and_the_cap():
    torch.manual_seed(0)
    logprobs = -torch.rand(2, 5, dtype=torch.float64) * 3
    logprobs.requires_grad_(True)
    proximal = logprobs.detach() + torch.randn(2, 5, dtype=torch.float64) * 0.1  # the policy before the update
    behaviour = proximal - torch.tensor([[2.0, 0.1, -0.5, 0.0, 1.5], [0.3, -1.0, 3.0, 0.2, 0.0]], dtype=torch.float64)
    behaviour[1, 4] = math.nan  # unknown: weight 1
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    advantages = torch.tensor([1.0, -0.5], dtype=torch.float64)
    loss, stats = clipped_policy_loss(
        logprobs, proximal, advantages, mask, 0.2, 0.28, behaviour_logprobs=behaviour, importance_sampling_cap=2.0
    )
    expected = 0.0
    truncated = 0
    for b in range(2):
        for t in range(5):
            if not mask[b, t]:
                continue
            known = not math.isnan(float(behaviour[b, t]))
            raw = math.exp(float(proximal[b, t] - behaviour[b, t])) if known else 1.0
            weight = min(raw, 2.0)
            truncated += raw >= 2.0
            ratio = math.exp(float(logprobs.detach()[b, t] - proximal[b, t]))
            a = float(advantages[b])
            expected += weight * -min(ratio * a, min(max(ratio, 0.8), 1.28) * a)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-12)
    assert stats["is_truncated_tokens"] == truncated == 2
    loss.backward()  # the weight carries no gradient: d/dlogp of weight x ratio x A is weight x ratio x A
    ratio = torch.exp(logprobs.detach() - proximal)
    weight = torch.clamp(torch.exp((proximal - behaviour).nan_to_num(0.0)), max=2.0)
    unclipped = (ratio > 0.8) & (ratio < 1.28)
    assert torch.allclose(logprobs.grad, -(weight * ratio * advantages[:, None] * unclipped * mask), atol=1e-12)


def test_the_pipeline_trains_records_versions_and_turns_the_correction_on_when_off_policy(model):
    seen: list[art.TrajectoryGroup] = []

    async def after_step(step, groups, metrics):
        seen.extend(groups)

    trainer = PipelineTrainer(
        model, model._backend, rollout, [f"q{i}" for i in range(20)], None,
        num_rollout_workers=2, min_batch_size=2, max_steps_off_policy=1, max_steps=3, eval_every_n_steps=0,
        learning_rate=1e-3, after_step=after_step,
    )  # fmt: skip
    assert trainer.train_config.importance_sampling_correction and trainer.train_config.loss == "cispo"
    asyncio.run(trainer.train())
    assert asyncio.run(model.get_step()) == 3
    records = history(model)
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
        assert record["train/staleness/max"] <= 1 and 0 < record["train/is_weight_mean"] <= 2.0
    trained = sum(v for k, v in records[-1].items() if k.startswith("train/staleness/hist/"))
    assert trained == trainer.state.trained_groups == len(seen) == 6
    for group in seen:
        for trajectory in group.trajectories:
            assert 0 <= trajectory.initial_policy_version <= trajectory.final_policy_version <= 3
    synchronous = PipelineTrainer(model, model._backend, rollout, [], None, max_steps_off_policy=0)
    assert not synchronous.train_config.importance_sampling_correction


def test_a_group_older_than_the_bound_is_dropped_and_counted_and_a_tied_one_too(model):
    released = asyncio.Event()
    started: dict[str, int] = {}

    async def slow_rollout(model, scenario, config):
        started[scenario] = trainer.policy_version
        if scenario == "slow":  # sampled by policy 0, it comes back after step 2: 2 versions behind
            await released.wait()
        return await rollout(model, scenario, config)

    async def after_step(step, groups, metrics):
        if step == 2:
            released.set()
        if trainer.state.stale_groups or step == 8:
            trainer.request_stop()

    scenarios = ["slow", "tie", *[f"q{i}" for i in range(12)]]
    trainer = PipelineTrainer(
        model, model._backend, slow_rollout, scenarios, None,
        num_rollout_workers=2, min_batch_size=1, max_batch_size=2, max_steps_off_policy=1, eval_every_n_steps=0,
        after_step=after_step,
    )  # fmt: skip
    asyncio.run(trainer.train())  # 2 claims: the straggler holds one until it is too old to train, then none
    assert started["slow"] == 0 and trainer.state.stale_groups == 1 and trainer.state.tied_groups == 1
    records = history(model)
    assert records[-1]["train/discarded/cum/stale_groups"] == 1
    assert records[-1]["train/discarded/cum/zero_variance_groups"] == 1
    assert sum(r["train/discarded/step/stale_groups"] for r in records) == 1
    assert all(r["train/staleness/max"] <= 1 for r in records)  # what was trained stayed within the bound
    assert {f"train/{d.key}" for d in art.PIPELINE_RL_METRIC_DEFINITIONS} <= records[-1].keys()  # each one logged


def test_more_workers_than_steps_can_use_sample_nothing_only_to_drop_it(model):
    """Eight workers, steps of 2 groups at most 1 version off policy: fast rollouts and a slower update would
    have them answer groups that wait past the bound (17 scenarios taken for 8 groups trained, before claims);
    at most 2 that can still be trained are claimed at a time. A group that finishes after a newer one may still
    be left behind: at most a few per run."""
    trainer = PipelineTrainer(
        model, model._backend, rollout, [f"q{i}" for i in range(40)], None,
        num_rollout_workers=8, min_batch_size=2, max_steps_off_policy=1, max_steps=4, eval_every_n_steps=0,
    )  # fmt: skip
    asyncio.run(trainer.train())
    assert trainer.claim_limit == 2 and trainer.state.trained_groups == 8
    assert trainer.state.scenario_offset - trainer.state.trained_groups <= 2 * trainer.claim_limit
    assert all(r["train/staleness/max"] <= 1 for r in history(model))


def test_resume_continues_from_the_models_step_with_the_scenarios_and_counts_after_the_first_run(model):
    taken: list[str] = []

    async def recording(model, scenario, config):
        taken.append(scenario)
        return await rollout(model, scenario, config)

    scenarios = [f"q{i}" for i in range(30)]
    evaluated: list[int] = []

    async def evaluate(model, step, config):
        evaluated.append(step)
        assert model.get_inference_name(step) == f"lora-{step}"
        return [art.Trajectory(messages_and_choices=[{"role": "user", "content": "x"}], reward=1.0)]

    def pipeline() -> PipelineTrainer:
        return PipelineTrainer(
            model, model._backend, recording, scenarios, None, evaluate,
            num_rollout_workers=1, min_batch_size=1, max_steps_off_policy=0, max_steps=2, eval_every_n_steps=2,
        )  # fmt: skip

    async def both_runs() -> tuple[PipelineTrainer, PipelineTrainer, int, dict]:
        first = pipeline()
        await first.train()
        step, state = await model.get_step(), json.loads((model._backend.run_dir(model) / STATE_FILE).read_text())
        taken.clear()
        second = pipeline()  # the same program started again
        await second.train()
        return first, second, step, state

    first, second, step, state = asyncio.run(both_runs())  # one event loop: the backend's gate is bound to it
    offset = first.state.scenario_offset
    assert step == 2 and state["trained_groups"] == 2 and state["scenario_offset"] == offset
    assert asyncio.run(model.get_step()) == 4 and evaluated == [0, 2, 4]  # step 0 is not evaluated again
    assert taken[0] == scenarios[offset] and second.state.trained_groups == 4
    assert history(model)[-1]["train/staleness/hist/0"] == 4  # max_steps_off_policy 0: every group on-policy


def test_with_no_off_policy_gap_the_corrected_step_is_the_synchronous_one(tiny_model, tmp_path):
    """Without sampler logprobs (pi_behaviour unknown, weight 1) the corrected loss is the plain one, bit for bit."""
    from transformers import AutoTokenizer

    from autorl.config import TrainerConfig
    from autorl.training.trainer import GRPOTrainer
    from tests.helpers.training import groups

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    batch = groups(tokenizer)
    for group in batch:
        for trajectory in group.trajectories:
            trajectory.messages_and_choices[-1].logprobs = None
    results = []
    for correction in (False, True):
        trainer = GRPOTrainer(tiny_model, tmp_path / str(correction), TrainerConfig(dtype="float32"))
        metrics = trainer.step(batch, TrainConfig(importance_sampling_correction=correction))
        weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        results.append((metrics["loss"], weights))
    assert results[0][0] == results[1][0]
    assert all(torch.equal(results[0][1][n], results[1][1][n]) for n in results[0][1])


def test_an_art_pipeline_program_runs_with_only_its_import_changed(tmp_path, tiny_model, chat):
    """tests/art_programs/pipeline.py, as ART's programs use `PipelineTrainer`, on the stand-in backend."""
    from art_programs import pipeline

    from autorl.config import TrainerConfig

    config = ServerConfig(lora_serving="adapter")
    backend = art.LocalBackend(tmp_path, server=config)
    backend.placement = ScriptedPlacement(chat, config)
    try:
        model = asyncio.run(pipeline.main(backend, str(tiny_model), trainer=TrainerConfig(dtype="float32")))
        logged = read_history(backend.run_dir(model), LOG_HISTORY_FILE)
    finally:
        backend.close()
    assert [r["step"] for r in logged if r["split"] == "train"] == [1, 2]
    assert [r["step"] for r in logged if r["split"] == "val"] == [1, 2]  # eval_every_n_steps=1, not at start
    trained = [r for r in logged if r["split"] == "train"]
    assert sum(v for k, v in trained[-1].items() if k.startswith("train/staleness/hist/")) == 4  # 2 steps x 2 groups


def train_stage(tmp_path, tiny_model, chat, **settings) -> StageContext:
    """The train stage's context on the stand-in: the run's `Policy` (the tiny model, trained for real, served by
    `chat`), a program judge that checks content (longer answers score higher), and the inputs and system prompt
    written as the upstream stages write them. Close `ctx.policy.backend` after."""
    config = RunConfig(
        model=str(tiny_model), group_size=4, groups_per_step=2, wandb=False, preflight="off",
        trainer={"dtype": "float32"}, server={"lora_serving": "adapter"},
        sentinel={"on_drift": "warn"},  # the random tiny model drifts at once: a rollback would make the steps vary
        **settings,
    )  # fmt: skip
    keys, store = upstream_artifacts(tmp_path, config)
    calls = Counter()
    policy = Policy(config, store.root, keys["train"], calls, TASK, tmp_path / "logs")
    policy.backend.placement = ScriptedPlacement(chat, config.server)
    judge = FunctionJudge(lambda messages: len(messages[-1]["content"]))
    tracker = Tracker(False, tmp_path, "run", "id")
    return StageContext(
        TASK, config, store, keys, policy, judge, tracker, tmp_path, Console(record=True, width=200), calls
    )


def test_the_train_stage_with_async_trains_its_steps_by_the_pipeline(tmp_path, tiny_model, chat):
    """`autorl run --async 1`'s train stage (`train_pipelined`) on the stand-in: the run's per-step records
    (trajectories, cost, history) and the pipeline's figures in each step's line."""
    ctx = train_stage(tmp_path, tiny_model, chat, steps=3, max_steps_off_policy=1)
    policy, config = ctx.policy, ctx.config
    try:

        async def stage() -> int:
            await policy.start()  # as the stage's `run` does first
            return await train_pipelined(ctx, "Be brief.", ["q1", "q2", "q3"], 0, config.steps, noise=0.0)

        step = asyncio.run(stage())
    finally:
        policy.backend.close()
    assert step == 3 and [r["step"] for r in read_history(policy.run_dir)] == [1, 2, 3]
    assert all((policy.run_dir / "steps" / f"{n:04d}" / STEP_COST).is_file() for n in (1, 2, 3))
    assert all((policy.run_dir / "trajectories" / f"{n:04d}.parquet").is_file() for n in (1, 2, 3))
    text = ctx.console.export_text()
    lines = [line for line in text.splitlines() if "/3  reward" in line]
    assert len(lines) == 3, text
    assert all("staleness" in line and "dropped stale" in line for line in lines)
    assert ctx.calls["policy"] >= 3 * 2 * 4


def test_with_async_a_group_within_the_judges_noise_is_tied_as_in_the_synchronous_loop(
    tmp_path, tiny_model, chat, monkeypatch
):
    """The judge audit's noise floor is the update's tie spread in the pipeline too: here no two answers lie
    further apart than the noise, so no group trains (the stand-in judge's scores differ by answer length); and
    the pipeline validates nothing (validation is the synchronous loop's), not even its last step."""
    ctx = train_stage(tmp_path, tiny_model, chat, steps=2, max_steps_off_policy=1, validate_every=1)
    monkeypatch.setattr(train, "judge_noise", lambda ctx: (1e9, True))  # the audit's figure, a trusted judge
    try:
        asyncio.run(train.run(ctx))
    finally:
        ctx.policy.backend.close()
    history = read_history(ctx.policy.run_dir)
    assert [h["step"] for h in history] == [1, 2] and all(h["groups_trained"] == 0 for h in history)
    assert validated_steps(ctx.policy.run_dir) == []


@pytest.mark.parametrize("off_policy", [0, 1], ids=["synchronous", "async"])
def test_both_training_loops_trace_each_step_with_its_update_under_it(tmp_path, tiny_model, chat, spans, off_policy):
    """The train stage's spans (`train.run`), synchronous or `--async 1`, read back from the in-memory exporter: a
    step span per step under the stage's, with the step, its reward (the history's) and its cost; the update span
    under it with the same step, the groups trained and the update's figures; the same attributes in both loops.
    The synchronous loop's rollouts are under their step, the pipeline's under the stage: they run ahead of the
    step that trains them."""
    ctx = train_stage(tmp_path, tiny_model, chat, steps=2, max_steps_off_policy=off_policy)
    try:

        async def stage() -> None:
            with tracing.span("autorl.stage train"):
                await train.run(ctx)

        asyncio.run(stage())
    finally:
        ctx.policy.backend.close()
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    (stage_span,) = [s for s in finished if s.name == "autorl.stage train"]
    steps = sorted((s for s in finished if s.name == "autorl.step"), key=lambda s: s.attributes["autorl.step"])
    updates = [s for s in finished if s.name == "autorl.update"]
    assert [s.attributes["autorl.step"] for s in steps] == [1, 2]
    assert all(s.parent.span_id == stage_span.context.span_id for s in steps)
    assert all(
        set(s.attributes) == {"openinference.span.kind", "autorl.step", "autorl.reward", "autorl.usd"} for s in steps
    )
    rewards = [r["reward"] for r in read_history(ctx.policy.run_dir)]
    assert [s.attributes["autorl.reward"] for s in steps] == rewards
    parent_steps = sorted(
        (by_id[u.parent.span_id].attributes["autorl.step"], u.attributes["autorl.step"]) for u in updates
    )
    assert parent_steps == [(1, 1), (2, 2)] and all(by_id[u.parent.span_id].name == "autorl.step" for u in updates)
    for update in updates:
        assert update.attributes["autorl.groups"] == ctx.config.groups_per_step
        assert {"autorl.update.loss", "autorl.update.trained_tokens", "autorl.update.step_time_s"} <= set(
            update.attributes
        )
    rollouts = [s for s in finished if s.name == "autorl.rollout"]
    assert rollouts and {by_id[r.parent.span_id].name for r in rollouts} == (
        {"autorl.stage train"} if off_policy else {"autorl.step"}
    )


def test_training_validates_every_k_steps_and_the_best_checkpoint_is_the_best_validated(
    tmp_path, tiny_model, chat, caplog
):
    """`--validate-every 2` over 3 steps: steps 2 and 3 (the last) answer the held-out inputs beside the base
    answers, their means are logged as `val/reward` (the trainer's real `model.log`), the best step is the
    validated one with the highest, and `keep_checkpoints` "latest,best" keeps it (step 1, before any
    validation, by its training reward: retention has no missing metric to warn of)."""
    ctx = train_stage(tmp_path, tiny_model, chat, steps=3, validate_every=2, validation_inputs=2)
    ctx.config.keep_checkpoints = "latest,best"
    try:
        asyncio.run(train.run(ctx))
    finally:
        ctx.policy.backend.close()
    logged = [r for r in read_history(ctx.policy.run_dir, LOG_HISTORY_FILE) if r.get("split") == "val"]
    assert [r["step"] for r in logged] == [2, 3]
    best = max(logged, key=lambda r: (r["val/reward"], r["step"]))["step"]
    assert train.best_step(ctx) == best and bookkeeping.best_metric(ctx.config, ctx.policy.run_dir) == "val/reward"
    assert "was logged for any checkpoint" not in caplog.text
    kept = sorted(int(p.name) for p in (ctx.policy.run_dir / "checkpoints").iterdir())
    assert kept == sorted({best, 3})
    text = " ".join(ctx.console.export_text().split())
    assert f"step 3: validation {logged[1]['val/reward']:.3f} on 2 held-out inputs (best so far: step {best})" in text

    # killed after step 3's update, before its validation: the rerun validates it, and trains nothing again
    kept_records = [r for r in read_history(ctx.policy.run_dir, LOG_HISTORY_FILE) if r.get("step") != 3]
    (ctx.policy.run_dir / LOG_HISTORY_FILE).write_text("".join(json.dumps(r) + "\n" for r in kept_records))
    trained = len(read_history(ctx.policy.run_dir))
    ctx = train_stage(tmp_path, tiny_model, chat, steps=3, validate_every=2, validation_inputs=2)
    try:
        asyncio.run(train.run(ctx))
    finally:
        ctx.policy.backend.close()
    assert validated_steps(ctx.policy.run_dir) == [2, 3] and len(read_history(ctx.policy.run_dir)) == trained
