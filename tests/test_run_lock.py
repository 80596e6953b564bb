"""Two runs on one run name (or one training) at the same time: the second is refused with one line, and a
killed run leaves no stuck lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autorl.home import LockedError
from autorl.task import TaskSpec
from pipelines.cli import app
from pipelines.config import RunConfig
from pipelines.run_lock import run_locks
from pipelines.staged_run import stage_keys

HOLD = """
import subprocess, sys, time
from pathlib import Path
from pipelines.run_lock import run_locks
with run_locks(Path(sys.argv[1]), sys.argv[2], sys.argv[3]):
    child = subprocess.Popen(["sleep", "300"])  # a server the run started: it must not keep the lock
    print(child.pid, flush=True)
    time.sleep(300)
"""


def hold(home: Path, name: str, train_key: str) -> tuple[subprocess.Popen, int]:
    """A process holding the locks of run `name`; returns it and the pid of its child."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(home), name, train_key], stdout=subprocess.PIPE, text=True
    )
    return holder, int(holder.stdout.readline())


def test_a_held_run_is_refused_and_a_killed_holder_leaves_no_lock(tmp_path):
    holder, child = hold(tmp_path, "r", "k1")
    try:
        with pytest.raises(LockedError) as error, run_locks(tmp_path, "r", "k2"):
            pass
        message = str(error.value)
        assert message.startswith(f"run 'r' is in use by process {holder.pid} (since ")
        assert message.endswith("; wait for it to finish, or choose another --name")
        same_training = r"^training k1 \(another run with the same settings\) is in use"
        with pytest.raises(LockedError, match=same_training), run_locks(tmp_path, "other-name", "k1"):
            pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert Path(f"/proc/{child}").exists(), "the holder's child lives on"
        with run_locks(tmp_path, "r", "k1"):  # free once the holder is dead, its child alive or not
            pass
    finally:
        holder.kill()
        os.kill(child, signal.SIGKILL)


def test_autorl_run_on_a_run_name_in_use_is_one_line_before_anything_starts(tmp_path):
    task = "Say hello"
    keys = stage_keys(TaskSpec(description=task), RunConfig(home=tmp_path))
    holder, child = hold(tmp_path, "busy", keys["train"])
    try:
        result = CliRunner().invoke(app, ["run", task, "--home", str(tmp_path), "--name", "busy", "--no-wandb"])
        assert result.exit_code == 1
        assert result.output.strip() == result.output.strip().splitlines()[0]  # one line
        assert f"run 'busy' is in use by process {holder.pid}" in result.output
        assert not (tmp_path / "artifacts").exists(), "refused before any stage ran"
        assert not (tmp_path / "runs" / "busy" / "run.json").exists(), "the running run's record is untouched"
    finally:
        holder.kill()
        os.kill(child, signal.SIGKILL)
