"""`autorl/serving/die_with_parent.py --group`, the supervisor the vLLM servers run under, ends the whole process
group it leads however its parent or its command ends, also when a process of the group ignores SIGTERM
(as a vLLM server stuck in its shutdown does)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from autorl.serving.die_with_parent import GRACE_S, wrapped
from tests.helpers.processes import alive, descendants, wait_gone

STUBBORN = ["sh", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"]
"""A command whose processes ignore SIGTERM (an ignored signal stays ignored in its children)."""


def wait_for_group(supervisor: int, size: int) -> set[int]:
    """The processes under `supervisor` once there are `size` of them."""
    deadline = time.monotonic() + 20
    while len(found := alive(descendants(supervisor))) < size and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(found) == size, found
    return found


def test_the_group_ends_when_the_parent_is_killed():
    starts_and_sleeps = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(300)"
    parent = subprocess.Popen([sys.executable, "-c", starts_and_sleeps, *wrapped(STUBBORN, group=True)])
    try:
        group = wait_for_group(parent.pid, 4)  # the supervisor, sh and two sleeps
        parent.kill()
        parent.wait()
        assert not wait_gone(group, GRACE_S + 10)
    finally:
        parent.kill()


def test_the_command_ends_when_the_supervisor_is_sigkilled():
    supervisor = subprocess.Popen(wrapped(["sleep", "300"], group=True))
    try:
        command = wait_for_group(supervisor.pid, 1)
        supervisor.kill()  # as Ray kills an actor's children: no chance to end the group
        supervisor.wait()
        assert not wait_gone(command, 10)
    finally:
        supervisor.kill()


def test_sigterm_ends_the_group_and_reports_the_signal():
    supervisor = subprocess.Popen(wrapped(STUBBORN, group=True), start_new_session=True)
    group = wait_for_group(supervisor.pid, 3)
    started = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(GRACE_S + 10) == 128 + signal.SIGTERM
    assert time.monotonic() - started >= GRACE_S - 0.5  # SIGTERM was ignored: the SIGKILL came after the grace
    assert not wait_gone(group, 5)


@pytest.mark.parametrize("script, code", [("exit 3", 3), ("kill -9 $$", 128 + 9)])
def test_a_command_that_ends_by_itself_takes_what_it_left_and_its_code(tmp_path, script, code):
    pid_file = tmp_path / "left.pid"
    supervisor = subprocess.Popen(wrapped(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; {script}"], group=True))
    assert supervisor.wait(20) == code
    assert not wait_gone({int(pid_file.read_text())}, 5)


def test_a_command_that_cannot_start_is_named():
    result = subprocess.run(wrapped(["no-such-command-xyz"], group=True), capture_output=True, text=True, timeout=20)
    assert result.returncode == 127 and "cannot run 'no-such-command-xyz'" in result.stderr
