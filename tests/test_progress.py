"""Long waits are said in plain lines where stderr is not a terminal (a log, CI), at the start, while they
last and at the end; on a terminal tqdm redraws them in place."""

import asyncio
import io
import time

from autorl import Trajectory, TrajectoryGroup, gather_trajectory_groups, progress
from autorl.progress import gather_counted, progress_bar, waiting
from autorl.serving.config import ServerConfig


def test_a_bar_off_a_terminal_prints_its_count_as_it_goes_and_at_the_end(monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)  # a line for every update
    out = io.StringIO()
    bar = progress_bar("inputs from embedded", 4, "input", stream=out)
    bar.update(1)
    bar.set_postfix_str("groups done 1/2")
    bar.update(3)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("inputs from embedded: 0/4 inputs (")
    assert lines[1].startswith("inputs from embedded: 1/4 inputs (")
    assert lines[2].startswith("inputs from embedded: 4/4 inputs, groups done 1/2 (")
    assert lines[-1].endswith(", done)")


def test_a_bar_without_a_label_says_nothing():
    out = io.StringIO()
    bar = progress_bar(None, 3, "rollout", stream=out)
    bar.update(3)
    bar.close()
    assert out.getvalue() == ""


def test_a_wait_off_a_terminal_says_what_it_waits_for_until_it_ends(monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.01)
    out = io.StringIO()
    with waiting("starting the vLLM server of m", stream=out):
        deadline = time.monotonic() + 10
        while out.getvalue().count("\n") < 2 and time.monotonic() < deadline:  # the start line and a tick
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert lines[0] == "starting the vLLM server of m ..."
    assert lines[1].startswith("starting the vLLM server of m: ") and lines[1].endswith("s")
    assert lines[-1].startswith("starting the vLLM server of m: done in ")


def test_a_wait_that_fails_says_it_stopped():
    out = io.StringIO()
    try:
        with waiting("writing", stream=out):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().splitlines()[-1].startswith("writing: stopped after ")


def test_a_server_start_names_what_the_server_is_for_and_warns_of_the_first_compile(monkeypatch, tmp_path):
    from autorl.serving import vllm_server

    monkeypatch.setattr(vllm_server, "cuda_available", lambda: False)
    monkeypatch.setattr(vllm_server, "compile_cache", lambda: tmp_path / "absent")
    compiled = ServerConfig(enforce_eager=False, kv_cache_bytes=2**20)
    policy = vllm_server.VLLMServer(tmp_path, "0123abcd", tmp_path / "log", compiled, label="the policy 0123abcd (m)")
    assert policy._start_message().startswith("starting the vLLM server of the policy 0123abcd (m) (the first start")
    eager = vllm_server.VLLMServer(
        tmp_path, "m", tmp_path / "log", ServerConfig(enforce_eager=True, kv_cache_bytes=2**20)
    )
    assert eager._start_message() == "starting the vLLM server of m" and "--enforce-eager" in eager.command()
    monkeypatch.setattr(vllm_server, "compile_cache", lambda: tmp_path)  # compiled before: no warning
    again = vllm_server.VLLMServer(tmp_path, "m", tmp_path / "log", compiled)
    assert again._start_message() == "starting the vLLM server of m" and "--enforce-eager" not in again.command()


def test_gathering_counts_the_rollouts_it_runs_not_the_answers_given_already_made(monkeypatch, capsys):
    """A group of answers made earlier (the baseline's, reused by evaluate) and rollouts still to run: the bar
    ends at the rollouts it ran, not at half of every answer, with every group done."""
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)

    async def rollout() -> Trajectory:
        return Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}])

    def group() -> TrajectoryGroup:
        return TrajectoryGroup([Trajectory(), Trajectory(), rollout(), rollout()])

    gathered = asyncio.run(gather_trajectory_groups([group(), group()], pbar_desc="evaluate", after_each=lambda g: g))
    assert [len(g) for g in gathered] == [4, 4]
    last = [line for line in capsys.readouterr().err.splitlines() if line.startswith("evaluate: ")][-1]
    assert last.startswith("evaluate: 4/4 rollouts, groups done 2/2 (") and last.endswith(", done)"), last


def test_gather_counted_returns_in_input_order_counts_each_as_it_ends_and_closes_on_a_failure(monkeypatch, capsys):
    """The one bar-around-gather of the judge stages and `gather_trajectories`: results in the order given
    (not the order they finished), the bar at every one done; a failure is raised and the bar still closed."""
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)

    async def after(seconds: float, value: int) -> int:
        await asyncio.sleep(seconds)
        if value < 0:
            raise ValueError("judge down")
        return value

    assert asyncio.run(gather_counted([after(0.03, 1), after(0.0, 2), after(0.01, 3)], "judging", "group")) == [1, 2, 3]
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("judging: 0/3 groups (") and lines[-1].startswith("judging: 3/3 groups (")
    assert lines[-1].endswith(", done)")
    try:
        asyncio.run(gather_counted([after(0.0, 1), after(0.0, -1)], "judging", "group"))
    except ValueError as exc:
        assert str(exc) == "judge down"
    else:
        raise AssertionError("the failure was not raised")
    assert capsys.readouterr().err.splitlines()[-1].endswith(", done)")
