"""ART-style client programs (tests/art_programs/) run unchanged but for their import on one backend: one vLLM
server on the embedded model, which the embedded RULER judge shares (adapter serving keeps the base weights
served under their own name; RULER's plumbing is checked on it too). Each program trains steps of the same model
and resumes where the programs before it stopped, as a user's next program would; each test asserts relative to
the step, records and checkpoints it found (or sets up what it asserts on), so the tests pass in any order. The
last two are written as ART's 2026 docs write programs: SFT warm-up, `backend.train(...)` and its `TrainResult`,
explicit logs. A tool-using agent and a LangGraph agent train the same model on that server too, and so does an
agent without trajectory code, captured by ART's capture scopes (2026 and 2025 names)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pandas as pd
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # a program imports LiteLLM: no price-map download
from art_programs import captured_agent, dataset_loop, guess_the_number, ruler_judged, sft_warmup, yes_no_maybe

import autorl as art
import ruler
from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history
from autorl.local import LocalBackend
from autorl.serving.config import ServerConfig
from autorl.training.checkpoints import complete_checkpoints
from autorl.trajectories import Trajectory, TrajectoryGroup
from tests.helpers.limits import scaled

pytestmark = pytest.mark.slow


class Session:
    """The programs' shared backend and the event loop they all run on (the backend's locks and gates belong
    to one loop)."""

    def __init__(self, home):
        self.home = home
        self.loop = asyncio.new_event_loop()
        self.backend = LocalBackend(home, server=ServerConfig(lora_serving="adapter", startup_timeout_s=scaled(240)))

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    @property
    def run_dir(self):
        return self.home / "art-programs" / "models" / "agent"  # ART's layout

    def checkpoints(self) -> list[int]:
        return [step for step, _ in complete_checkpoints(self.run_dir / "checkpoints")]  # trained: not 0000

    def step(self) -> int:
        """The programs' model's step as the backend has it: where the next program starts."""
        return self.run(self.backend.get_step(art_model()))

    def logged(self) -> list[dict]:
        return read_history(self.run_dir, LOG_HISTORY_FILE)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    home = tmp_path_factory.mktemp("art-programs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTORL_HOME", str(home))  # the judge's cache
        session = Session(home)
        try:
            yield session
        finally:
            session.backend.close()
            session.loop.close()


@pytest.mark.timeout(300)  # ~60 s on CI: the server's start, two steps of three-turn games
def test_a_multi_turn_game_without_logprobs_logs_validation_and_deletes_checkpoints(session, caplog):
    start, records = session.step(), len(session.logged())
    model = session.run(guess_the_number.main(session.backend))
    assert session.run(model.get_step()) == start + 2
    assert "_internal_config: not supported by autorl, ignored: gpu_memory_utilization" in caplog.text  # on CPU
    logged = session.logged()[records:]
    assert [(r["step"], r["split"]) for r in logged] == [(start, "val"), (start + 1, "val")]
    assert all("val/reward" in r and "val/turns" in r for r in logged)
    assert len(pd.read_parquet(session.run_dir / "trajectories" / "val" / f"{start + 1:04d}.parquet")) == 2
    history = read_history(session.run_dir)[start:]
    assert [h["step"] for h in history] == [start + 1, start + 2]
    assert sum(h["trained_tokens"] for h in history) > 0  # multi-turn choices without logprobs trained
    # delete_checkpoints before each step keeps ART's latest and best: the two steps, at most one best before them
    assert session.checkpoints()[-2:] == [start + 1, start + 2] and len(session.checkpoints()) <= 3


@pytest.mark.timeout(300)  # ~40 s on CI: two judged groups
def test_a_ruler_scored_group_trains_and_litellm_reaches_the_model(session):
    start = session.step()
    model, reply = session.run(ruler_judged.main(session.backend))
    assert session.run(model.get_step()) == start + 2
    assert isinstance(reply, str)
    steps = read_history(session.run_dir)[start:]
    assert [h["step"] for h in steps] == [start + 1, start + 2]
    judged = sum(h["groups"] for h in steps)
    assert judged >= 1, "the embedded judge scored no group in two steps"


@pytest.mark.timeout(120)  # a few judge calls on the session's server
def test_the_embedded_judge_on_that_server_scores_a_group_in_range_and_a_repeat_from_its_cache(session, tmp_path):
    """RULER's plumbing with `judge_model="embedded"` on vLLM (a 135M judge cannot rank answers well): structured
    output keeps its answer parseable, scores land in [0, 1] with their metrics, identical rollouts get one
    verdict, and a repeat is answered from the cache. The session's adapter-serving server serves the base
    weights, so the judge asks it rather than starting a server of its own."""
    from autorl.serving.vllm_server import VLLMServer

    def rollout(answer: str) -> Trajectory:
        messages = [
            {"role": "system", "content": "Answer arithmetic questions with the number only."},
            {"role": "user", "content": "What is 6 times 7?"},
            {"role": "assistant", "content": answer},
        ]
        return Trajectory(messages_and_choices=messages, reward=0.5)

    group = TrajectoryGroup([rollout("42"), rollout("48"), rollout("The product is 42."), rollout("42")])
    task = "Answer arithmetic questions for school children."
    starts = VLLMServer.starts
    scored = session.run(ruler.ruler_score_group(group, "embedded", cache_dir=tmp_path, task=task))
    assert VLLMServer.starts == starts  # no server of its own
    assert len(scored) == 4
    for trajectory in scored:
        assert 0.0 <= trajectory.reward <= 1.0
        assert trajectory.metrics["ruler_score"] == trajectory.reward
        assert trajectory.metrics["independent_reward"] == 0.5
        assert trajectory.metrics["ruler_attempts"] >= 1
        assert trajectory.metrics["ruler_prompt_tokens"] > 0
        assert trajectory.metrics["ruler_shortened"] == 0.0  # a short group fits the 2,048-token context
        assert trajectory.logs and trajectory.logs[0].startswith("RULER explanation: ")
    assert scored.trajectories[0].reward == scored.trajectories[3].reward  # identical rollouts, one verdict

    again = session.run(ruler.ruler_score_group(group, "embedded", cache_dir=tmp_path, task=task))
    assert [t.reward for t in again] == [t.reward for t in scored]
    assert all(t.metrics["ruler_cache_hit"] == 1.0 for t in again)


@pytest.mark.timeout(300)  # ~40 s on CI: two steps of two groups with a tool
def test_a_dataset_loop_resumes_at_the_model_s_step_and_keeps_the_latest_and_the_best(session):
    start = session.step()
    if start:  # the newest checkpoint is made the best by val/reward, above any reward a rollout gets
        session.run(session.backend.log(art_model(), [], "val", {"reward": 10.0}, start))
    model = session.run(dataset_loop.main(session.backend))
    assert session.run(model.get_step()) == start + 2
    history = read_history(session.run_dir)
    assert [h["step"] for h in history] == list(range(1, start + 3))  # every step's record outlives its checkpoint
    # before step start+1: all but `start` (the latest and the best) went; before start+2: none but start+1 (the
    # latest) and `start` (the best) were left; start+2 stays until the next call (ART deletes before each step)
    assert session.checkpoints() == ([start] if start else []) + [start + 1, start + 2]
    assert session.backend.serving(model).served_steps() == {start + 2}


@pytest.mark.timeout(300)  # ~60 s on 2 cores: two SFT steps, two RL steps of two groups
def test_an_sft_warm_up_then_backend_first_rl_counts_its_steps_and_logs_explicitly(session):
    start, records = session.step(), len(session.logged())
    sft_file = str(Path(sft_warmup.__file__).with_suffix(".jsonl"))
    model, results = session.run(sft_warmup.main(session.backend, sft_file))
    history = read_history(session.run_dir)[start:]
    assert [(h["step"], h.get("sft")) for h in history] == [
        (start + 1, 1.0), (start + 2, 1.0), (start + 3, None), (start + 4, None)
    ]  # fmt: skip  # 4 conversations in batches of 2, a chunk of 1 batch each: two SFT steps, then RL continues
    assert all(h["trained_tokens"] > 0 for h in history[:2])  # the tool-call conversation included
    assert [r.step for r in results] == [start + 3, start + 4] and session.run(model.get_step()) == start + 4
    assert all(r.checkpoint_path == str(session.run_dir / "checkpoints" / f"{r.step:04d}") for r in results)
    logged = [r for r in session.logged()[records:] if r["split"] == "train"]
    metrics = [r for r in logged if "train/loss" in r]
    assert [r["step"] for r in metrics] == [start + 3, start + 4]  # log(metrics=, step=) at the result's step
    assert metrics[0]["train/loss"] == results[0].metrics["loss"]
    assert session.backend.serving(model).served_steps() == {start + 4}


@pytest.mark.timeout(300)  # ~60 s on 2 cores: two steps of two groups, the second judged by the embedded RULER
def test_yes_no_maybe_in_batches_as_they_finish_trains_through_the_backend_and_ruler_explains(session):
    start, records = session.step(), len(session.logged())
    model, results, judged = session.run(yes_no_maybe.main(session.backend))
    assert [r.step for r in results] == [start + 1, start + 2] and session.run(model.get_step()) == start + 2
    assert all(r.metrics["groups"] == 2 for r in results[:1]) and "reward" in results[0].metrics
    assert judged, "the embedded judge scored no group"
    assert all(t.logs[-1].startswith("RULER explanation: ") for g in judged for t in g.trajectories)
    logged = session.logged()[records:]
    assert {r["step"] for r in logged if "train/length" in r} == {start, start + 1}  # the groups, before each step


@pytest.mark.timeout(300)  # two steps of the programs' model on their server
def test_agent_rollouts_with_tools_on_the_embedded_model_train(session):
    """The embedded model with its tool-calling template behind vLLM's hermes parser: rollouts with the
    example `convert` tool run (whatever the small model does with it), and a step trains on them; then
    the docs' LangGraph agent (a ReAct graph with one Python tool, `autorl.langgraph`) on the same
    server: its wrapped rollouts carry the sampled tokens of every model turn, and a second step trains.
    On the programs' server and model, as a user's tool agent would continue their training."""
    from openai.types.chat.chat_completion import Choice

    from autorl.agents.rollout import RolloutConfig, agent_rollout, openai_completion
    from autorl.agents.tools import Toolbox
    from autorl.task import load_task
    from autorl.training.sequences import TOKEN_ID_PREFIX
    from tests.helpers.docs import docs_example

    task = load_task(Path(__file__).resolve().parents[1] / "pipelines" / "tasks" / "unit_conversion_tool.toml")

    async def scenario():
        model = art_model()
        await model.register(session.backend)
        toolbox = await Toolbox.open(task)
        try:
            complete = openai_completion(
                model.openai_client(), model.get_inference_name(), RolloutConfig(max_tokens=48)
            )
            question = "Convert 3 miles to kilometres with the convert tool."
            rollouts = [
                agent_rollout(complete, task.description, question, toolbox=toolbox, max_turns=2) for _ in range(6)
            ]
            group = await art.TrajectoryGroup(rollouts)
            assert not group.exceptions and len(group) == 6
            for i, trajectory in enumerate(group.trajectories):
                assert trajectory.tools[0]["function"]["name"] == "convert"
                calls = trajectory.metrics["tool_calls"]
                assert sum(m["role"] == "tool" for m in trajectory.messages()) == calls
                trajectory.reward = float(calls > 0) + i / 10  # distinct rewards: the group carries signal
            metrics = await model.train([group], config=art.TrainConfig())
            assert metrics["trained_tokens"] > 0

            adders = await docs_example()["adder_group"](model)
            assert not adders.exceptions and len(adders) == 2
            for i, trajectory in enumerate(adders):
                choices = [c for c in trajectory.messages_and_choices if isinstance(c, Choice)]
                assert choices and all(t.token.startswith(TOKEN_ID_PREFIX) for t in choices[-1].logprobs.content)
                assert [t["function"]["name"] for t in trajectory.tools] == ["add"]
                assert trajectory.metrics["turns"] == len(choices)
                trajectory.reward += i / 10
            metrics = await model.train([adders], config=art.TrainConfig())
            assert metrics["groups_trained"] == 1 and metrics["trained_tokens"] > 0
            return sum(t.metrics["tool_calls"] for t in group.trajectories)
        finally:
            await toolbox.aclose()

    start = session.step()
    calls = session.run(scenario())
    assert session.step() == start + 2
    print(f"tool calls in 6 rollouts of the embedded model: {calls}")


def art_model():
    """The programs' model, as the backend knows it (by name)."""
    from autorl.model import TrainableModel

    return TrainableModel(name="agent", project="art-programs", base_model="embedded:smollm2-135m")


@pytest.mark.timeout(
    900
)  # the server start, two steps of a group of three two-turn rollouts: 488 s at load 8 on 2 cores
def test_an_agent_without_trajectory_code_is_captured_and_trains_with_art_s_2026_and_2025_names(session):
    """The OpenAI-SDK agent of `captured_agent` (a tool, two turns, the second streamed with logprobs) against
    the embedded model on vLLM: each captured trajectory holds both turns as `Choice`s, the streamed one with
    the sampled tokens' ids and logprobs; a step trains on them, under each spelling of ART's capture scopes."""
    from openai.types.chat.chat_completion import Choice

    from autorl.training.sequences import TOKEN_ID_PREFIX

    start = session.step()
    _, group, result = session.run(captured_agent.main(session.backend))
    assert not group.exceptions and len(group) == 3 and result.step == start + 1
    for trajectory in group:
        choices = [c for c in trajectory.messages_and_choices if isinstance(c, Choice)]
        assert len(choices) == 2 and trajectory.tools == captured_agent.TOOLS
        assert trajectory.additional_histories == [] and trajectory.metrics["duration"] > 0
        assert choices[-1].logprobs.content and all(t.token.startswith(TOKEN_ID_PREFIX) for t in choices[-1].logprobs.content)  # fmt: skip
        roles = [m["role"] for m in trajectory.messages()]
        assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "assistant" and len(roles) >= 5
    assert result.metrics["trained_tokens"] > 0
    _, groups, metrics = session.run(captured_agent.main_2025(session.backend))
    assert metrics["step"] == start + 2 and metrics["trained_tokens"] > 0
    assert all(len([c for c in t.messages_and_choices if isinstance(c, Choice)]) == 2 for t in groups[0])
