"""The sentinel that acts (`--on-drift`): a train stage on the tiny random Llama, trained by the real trainer
(its sentinel figures measured under the base weights), whose policy either writes as the base model does or
is pushed to drift: it writes the same token over and over, sure of each (sampling logprob ~0) where the base
model finds it unlikely, as a policy that games a form judge does. The drifting run is rolled back (or
stopped, or warned about) and every action is in `sentinel.jsonl` and the report; the other is left alone."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest
import torch
from rich.console import Console
from transformers import AutoModelForCausalLM, AutoTokenizer

from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history
from autorl.errors import AutoRLError
from autorl.tracking import Tracker
from autorl.training.checkpoints import latest_checkpoint
from autorl.trajectories import Trajectory
from pipelines import sentinel
from pipelines.config import RunConfig
from pipelines.records import step_costs
from pipelines.records import train as train_records
from pipelines.records.pricing import Meter
from pipelines.stage_context import StageContext
from pipelines.stages import report, train
from ruler import FunctionJudge
from tests.helpers.pipeline import TASK, upstream_artifacts
from tests.helpers.tiny import choice
from tests.helpers.training import backend_with_model

ANSWER_TOKENS = 6
DRIFT_FROM = 3
"""The drifting policy writes like the base model while answering from checkpoints before this one."""


class TinyPolicy:
    """The tiny model's policy: served by a stand-in, trained by the real trainer (`backend_with_model`).
    Its answers are sampled from the base model with their true logprobs, or, `drifting` from checkpoint
    `DRIFT_FROM` on, one token repeated with logprob -0.01 (`persistent`: also after a rollback)."""

    def __init__(self, tiny_model: Path, home: Path, drifting: bool, persistent: bool = False):
        self.backend, self.model = backend_with_model(tiny_model, home)
        self.tokenizer = AutoTokenizer.from_pretrained(tiny_model)
        self.base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        self.drifting, self.persistent = drifting, persistent
        self.generator = torch.Generator().manual_seed(0)
        self.gamed_token = self.tokenizer.encode("!", add_special_tokens=False)[0]
        self.meter = Meter()  # the tokens a run's cost counts, as `Policy` keeps them

    @property
    def run_dir(self) -> Path:
        return self.backend.run_dir(self.model)

    def beside_embedded_on_cpu(self) -> bool:
        return False

    async def start(self) -> None:
        pass

    async def serve_step(self, step: int) -> str:
        return await self.backend.serve_checkpoint(self.model, step)

    def drifts_now(self) -> bool:
        latest = latest_checkpoint(self.run_dir / "checkpoints")
        rolled_back = (self.run_dir / train_records.SENTINEL_ACTIONS).exists()
        return self.drifting and (latest[0] if latest else 0) >= DRIFT_FROM and (self.persistent or not rolled_back)

    async def answer(self, prompt: str, text: str, config: RunConfig, name: str | None = None) -> Trajectory:
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
        if self.drifts_now():
            ids, logprobs = [self.gamed_token] * ANSWER_TOKENS, [-0.01] * ANSWER_TOKENS
        else:
            ids, logprobs = self.sample(messages)
        content = self.tokenizer.decode(ids)
        return Trajectory(messages_and_choices=[*messages, choice(content, ids, logprobs)], metadata={"input": text})

    @torch.no_grad()
    def sample(self, messages: list[dict]) -> tuple[list[int], list[float]]:
        rendered = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer.encode(rendered, add_special_tokens=False)
        sampled, logprobs = [], []
        for _ in range(ANSWER_TOKENS):
            distribution = torch.log_softmax(self.base(torch.tensor([ids + sampled])).logits[0, -1], dim=-1)
            token = int(torch.multinomial(distribution.exp(), 1, generator=self.generator))
            sampled.append(token)
            logprobs.append(float(distribution[token]))
        return sampled, logprobs


def rising_judge() -> FunctionJudge:
    """A judge whose scores rise with every answer it sees (the training reward rises in both runs), spread
    within a group so that every group carries signal."""
    seen = itertools.count()

    def score(messages: list[dict]) -> float:
        n = next(seen)
        return min(1.0, n / 60) * 0.7 + (n % 4) * 0.1

    return FunctionJudge(score)


def stage_context(tmp_path: Path, policy: TinyPolicy, **settings) -> StageContext:
    # no preflight artifact here: the stage trains every input (the sentinel acts with the checks off too)
    config = RunConfig(
        group_size=4, groups_per_step=2, steps=7, **{"preflight": "off", "validate_every": 0, **settings}
    )
    keys, store = upstream_artifacts(tmp_path, config)
    tracker = Tracker(False, tmp_path, "run", "id")
    console = Console(record=True, width=400)
    return StageContext(TASK, config, store, keys, policy, rising_judge(), tracker, tmp_path, console)


def test_a_policy_that_stays_near_the_base_is_left_alone(tiny_model, tmp_path):
    policy = TinyPolicy(tiny_model, tmp_path / "home", drifting=False)
    ctx = stage_context(tmp_path, policy)
    asyncio.run(train.run(ctx))
    history = read_history(policy.run_dir)
    assert [h["step"] for h in history] == list(range(1, 8))
    assert history[-1]["reward"] > history[0]["reward"] + 0.3  # the reward rose ...
    measured = [h for h in history if "kl_to_base" in h]  # TrainerConfig.drift_every's steps (kl_beta 0)
    assert [h["step"] for h in measured] == [1, 4, 7]
    assert max(h["kl_to_base"] for h in measured) < 0.01  # ... with the policy at the base model
    assert train_records.sentinel_actions(policy.run_dir) == []
    assert "It never fired" in "\n".join(report.sentinel_section([], ctx.config))


def test_a_drifting_policy_is_rolled_back_with_a_kl_penalty_and_trains_on(tiny_model, tmp_path):
    policy = TinyPolicy(tiny_model, tmp_path / "home", drifting=True)
    ctx = stage_context(tmp_path, policy)
    asyncio.run(train.run(ctx))
    (action,) = train_records.sentinel_actions(policy.run_dir)
    # checkpoint 3 answered step 4 with the gamed answers: the sentinel fires there (the figures of steps 2-4 that
    # were measured: step 4's, TrainerConfig.drift_every being 3)
    assert (action["action"], action["step"], action["restored"]) == ("rollback", 4, 4 - sentinel.RISE_STEPS)
    assert [r["step"] for r in action["dropped"]] == [2, 3, 4] and action["dropped"][-1]["kl_to_base"] > 1
    assert action["kl_beta"] == ctx.config.sentinel.rollback_kl_beta
    history = read_history(policy.run_dir)
    assert [h["step"] for h in history] == list(range(1, 8))  # trained on to the asked-for steps
    assert "kl" not in history[0] and all("kl" in h for h in history[1:])  # the KL penalty from the rollback on
    assert all("kl_to_base" in h for h in history) and max(h["kl_to_base"] for h in history) < 0.5  # kl_beta > 0
    assert sorted(p.name for p in (policy.run_dir / train_records.ROLLED_BACK / "1" / "steps").iterdir()) == [
        "0002", "0003", "0004"
    ]  # fmt: skip
    assert "rolled back to step 1" in ctx.console.export_text()
    # the run's cost counts the dropped steps too: 7 checkpointed steps and the 3 trained again
    assert len(step_costs.steps_cost(policy.run_dir, 7)) == 10
    assert len(step_costs.steps_cost(policy.run_dir, 1)) == 1  # checkpoint 1 was made before them
    calls = [sum(json.loads(p.read_text())["model_calls"].values()) for p in policy.run_dir.rglob(step_costs.STEP_COST)]
    assert len(calls) == 10 and step_costs.training_cost(ctx, 7)[0] == sum(
        calls
    )  # the benchmark's calls count them too
    per_step = [(cost["step"], "dropped" in cost) for cost in step_costs.step_costs(ctx)]  # run.json's, in order
    assert per_step == [(2, True), (3, True), (4, True), *((n, False) for n in range(1, 8))]
    section = "\n".join(report.sentinel_section(train_records.sentinel_actions(policy.run_dir), ctx.config))
    assert "| 4 | rollback | restored checkpoint 1 (steps dropped and trained again: 2, 3, 4); kl_beta 0.1" in section


def test_a_rollback_drops_the_validation_records_of_the_steps_it_dropped(tiny_model, tmp_path):
    """Steps 2 and 4 were validated, then rolled back and trained again: each has the validation of the
    checkpoint that exists, once (`@best` and `--keep-checkpoints best` read the same records)."""
    policy = TinyPolicy(tiny_model, tmp_path / "home", drifting=True)
    asyncio.run(train.run(stage_context(tmp_path, policy, validate_every=2)))
    assert train_records.sentinel_actions(policy.run_dir)[0]["restored"] == 1
    logged = read_history(policy.run_dir, LOG_HISTORY_FILE)
    assert [r["step"] for r in logged if train_records.VAL_METRIC in r] == [2, 4, 6, 7]


def test_a_policy_that_keeps_drifting_is_stopped_under_stop(tiny_model, tmp_path):
    policy = TinyPolicy(tiny_model, tmp_path / "home", drifting=True, persistent=True)
    ctx = stage_context(tmp_path, policy, sentinel={"on_drift": "stop", "max_rollbacks": 1})
    with pytest.raises(AutoRLError, match="the policy moved far from the base model"):
        asyncio.run(train.run(ctx))
    assert [a["action"] for a in train_records.sentinel_actions(policy.run_dir)] == ["stop"]


def test_a_policy_that_drifts_past_its_rollbacks_ends_training_and_the_run_goes_on(tiny_model, tmp_path):
    """The default (rollback): after `max_rollbacks`, the next drift ends training at that step, recorded, and the
    stage finishes (its manifest says so and it counts as done), so the run evaluates what it trained."""
    policy = TinyPolicy(tiny_model, tmp_path / "home", drifting=True, persistent=True)
    ctx = stage_context(tmp_path, policy, sentinel={"on_drift": "rollback", "max_rollbacks": 1})
    summary = asyncio.run(train.run(ctx))
    actions = train_records.sentinel_actions(policy.run_dir)
    assert [a["action"] for a in actions] == ["rollback", "end"]
    assert summary["ended_by_sentinel"] == actions[-1]["step"] == summary["steps"] < 7
    said = " ".join(ctx.console.export_text().split())
    assert f"training ends at step {summary['steps']}, and the run evaluates what it trained" in said
    section = "\n".join(report.sentinel_section(actions, ctx.config))
    assert "| end | ended training there (its rollbacks spent)" in section


def test_warn_warns_once_and_goes_on(tiny_model, tmp_path):
    policy = TinyPolicy(tiny_model, tmp_path / "home", drifting=True, persistent=True)
    ctx = stage_context(tmp_path, policy, sentinel={"on_drift": "warn"})
    asyncio.run(train.run(ctx))
    assert [(a["action"], a["step"]) for a in train_records.sentinel_actions(policy.run_dir)] == [("warn", 4)]
    assert len(read_history(policy.run_dir)) == 7
    assert ctx.console.export_text().count("warning: step 4") == 1
