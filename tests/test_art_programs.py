"""ART-style client programs (tests/art_programs/) run unchanged but for their import, in order, on one
backend: one vLLM server on the embedded model, which the embedded RULER judge shares (adapter serving keeps
the base weights served under their own name). Each program trains two steps of the same model, so the later
ones resume where the earlier stopped, as a user's next program would."""

from __future__ import annotations

import asyncio
import os

import pandas as pd
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # a program imports LiteLLM: no price-map download
from art_programs import dataset_loop, guess_the_number, ruler_judged

from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history
from autorl.local import LocalBackend
from autorl.serving.config import ServerConfig

pytestmark = pytest.mark.slow


class Session:
    """The programs' shared backend and the event loop they all run on (the backend's locks and gates belong
    to one loop)."""

    def __init__(self, home):
        self.home = home
        self.loop = asyncio.new_event_loop()
        self.backend = LocalBackend(home, server=ServerConfig(lora_serving="adapter", startup_timeout_s=240))

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    @property
    def run_dir(self):
        return self.home / "art-programs" / "agent"

    def checkpoints(self) -> list[int]:
        return sorted(int(p.name) for p in (self.run_dir / "checkpoints").glob("[0-9]*"))


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
    model = session.run(guess_the_number.main(session.backend))
    assert session.run(model.get_step()) == 2
    assert "_internal_config: not supported by autorl, ignored: gpu_memory_utilization" in caplog.text  # on CPU
    logged = read_history(session.run_dir, LOG_HISTORY_FILE)
    assert [(r["step"], r["split"]) for r in logged] == [(0, "val"), (1, "val")]
    assert all("val/reward" in r and "val/turns" in r for r in logged)
    assert len(pd.read_parquet(session.run_dir / "trajectories" / "val" / "0001.parquet")) == 2
    history = read_history(session.run_dir)
    assert [h["step"] for h in history] == [1, 2]
    assert sum(h["trained_tokens"] for h in history) > 0  # multi-turn choices without logprobs trained
    assert session.checkpoints() == [1, 2]


@pytest.mark.timeout(300)  # ~40 s on CI: two judged groups
def test_a_ruler_scored_group_trains_and_litellm_reaches_the_model(session):
    model, reply = session.run(ruler_judged.main(session.backend))
    assert session.run(model.get_step()) == 4
    assert isinstance(reply, str)
    frame = pd.read_parquet(session.run_dir / "trajectories" / "val" / "0001.parquet")  # the first program's
    assert len(frame) == 2
    steps = read_history(session.run_dir)[2:]
    assert [h["step"] for h in steps] == [3, 4]
    judged = sum(h["groups"] for h in steps)
    assert judged >= 1, "the embedded judge scored no group in two steps"


@pytest.mark.timeout(300)  # ~40 s on CI: two steps of two groups with a tool
def test_a_dataset_loop_resumes_at_the_model_s_step_and_keeps_the_latest_and_the_best(session):
    model = session.run(dataset_loop.main(session.backend))
    assert session.run(model.get_step()) == 6
    history = read_history(session.run_dir)
    assert [h["step"] for h in history] == [1, 2, 3, 4, 5, 6]  # every step's record outlives its checkpoint
    # before step 5: 2 and 3 went (1 is the best by val/reward, the only one logged; 4 the latest);
    # before step 6: 4 went; 5 stays until the next call (ART deletes before each step)
    assert session.checkpoints() == [1, 5, 6]
    assert session.backend.serving(model).served_steps() == {6}
