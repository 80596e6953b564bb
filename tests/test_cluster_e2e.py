"""`autorl run --async 1 --ray local --replicas 2 --trainer-workers 2`: a Ray cluster on this machine, two vLLM
replicas of the embedded model and two data-parallel trainer workers as actors, with the asynchronous pipeline
trainer, through a whole pipeline; one replica's process is SIGKILLed as training starts (the
rollouts of step 1 next), no rollout is lost, and the replica is restarted and serves again before the run ends.

The task brings its system prompt and inputs and a program judges it, so the replicas are the only servers.
The synchronous loop sends its rollouts through the same replica pool; its handling of a dead replica (a
request sent again to another, the dead one restarted once) is tested against real HTTP servers in
test_cluster_routing.py.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.limits import scaled
from tests.helpers.processes import descendants, wait_gone, with_command_line

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")

GROUP_SIZE = 8
TASK = ["benchmarks/perf/learning_tasks/one_word.toml", "--judge", "benchmarks.perf.learning_tasks.judges:one_word"]
SIZES = ["--steps", "3", "--group-size", str(GROUP_SIZE), "--groups-per-step", "2", "--max-tokens", "64",
         "--eval-samples", "2", "--preflight", "off"]  # fmt: skip
"""Three steps of two full groups, time enough for the killed replica's restart (a vLLM start in a Ray actor); two answers per
validation input (the least eval allows) and no preflight checks, which the replicas serve like any other request
(tested elsewhere)."""
VALIDATION = 16
"""The task's validation inputs (its inputs file's "val" rows), each scored by the run's evaluation."""


def replica_actors(run: subprocess.Popen) -> set[int]:
    return with_command_line(descendants(run.pid), b"ray::ReplicaActor")


@pytest.mark.usefixtures("own_servers")  # looks at the processes the run started
@pytest.mark.timeout(1080)  # 135 s alone on 2 cores with native bf16, 586 s on an AVX2-only EPYC
def test_an_async_two_replica_two_worker_run_trains_and_a_killed_replica_loses_no_rollout(tmp_path):
    cluster = ["--async", "1", "--ray", "local", "--replicas", "2", "--trainer-workers", "2"]
    command = [sys.executable, "-m", "pipelines.cli", "run", *TASK, *SIZES, *cluster]
    run = subprocess.Popen(
        [*command, "--no-wandb", "--home", str(tmp_path / "home"), "--name", "ray"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)  # the run's output as it comes
    reader.start()
    servers: set[int] = set()
    killed = None
    try:
        deadline = time.monotonic() + scaled(960)
        while run.poll() is None and time.monotonic() < deadline:
            servers |= with_command_line(descendants(run.pid), b"vllm.entrypoints")
            training = any(line.startswith("train (") for line in lines)
            if killed is None and training and len(actors := replica_actors(run)) == 2:
                killed = min(actors)  # both replicas serve (the baseline is answered): the step rollouts are next
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.1)
        run.wait(timeout=scaled(60))
        reader.join(timeout=scaled(60))
    finally:
        run.kill()
    output = "".join(lines)
    assert run.returncode == 0, output
    assert killed is not None, output
    assert "replica" in output and "restarting it (1 of at most 3)" in output, output
    assert "is back, serving step" in output, output

    work = next(tmp_path.glob("home/artifacts/train/*"))
    history = [json.loads(line) for line in (work / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2, 3]
    assert sorted(p.name for p in (work / "checkpoints").iterdir()) == ["0001", "0002", "0003"]
    for step in sorted(work.glob("trajectories/*.parquet")):  # a lost rollout would leave a group short
        assert set(pd.read_parquet(step).groupby("input").size()) == {GROUP_SIZE}, step
    assert all(h["exceptions"] == 0 and h["trajectories"] == 2 * GROUP_SIZE for h in history), history
    record = json.loads((tmp_path / "home" / "runs" / "ray" / "run.json").read_text())
    assert record["stages"]["evaluate"]["summary"]["val_inputs"] == VALIDATION, record["stages"]["evaluate"]
    assert record["status"] == "done", record
    # two replicas and one restart; a request that failed on a live replica starts no server and counts none
    assert record["server_starts"] == 3, record
    assert not wait_gone(servers, 60), "vLLM servers outlived the run"
