"""End to end: `autorl run` on the embedded model through a real vLLM server, as a user runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
TASK = "Reply to a customer asking for a refund, politely, in two sentences"
SMALL = ["--group-size", "2", "--groups-per-step", "1", "--inputs", "6", "--max-tokens", "24"]


def autorl(*args: str, home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "autorl.cli", "run", TASK, "--home", str(home), "--name", "e2e", *SMALL, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    return {p for p in pids if running(p)}


def wait_gone(pids: set[int], timeout: float = 60) -> set[int]:
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive(pids)


def wait_for_server(process: subprocess.Popen, timeout: float = 600) -> set[int]:
    """The server's processes, once the run has started its vLLM server and begun stepping."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        servers = {p for p in descendants(process.pid) if b"vllm" in Path(f"/proc/{p}/cmdline").read_bytes()}
        if servers and process.poll() is None:
            return descendants(process.pid)
        assert process.poll() is None, process.stdout.read()
        time.sleep(1)
    raise AssertionError("the vLLM server did not start")


def test_run_two_steps_leaves_checkpoints_history_and_no_server(tmp_path):
    process = autorl("--steps", "2", home=tmp_path)
    children = wait_for_server(process)
    output, _ = process.communicate(timeout=1500)
    assert process.returncode == 0, output
    run_dir = tmp_path / "runs" / "e2e"
    assert (run_dir / "checkpoints" / "0001" / "adapter_model.safetensors").is_file()
    assert (run_dir / "checkpoints" / "0002" / "adapter_model.safetensors").is_file()
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2]
    assert all({"reward", "loss", "grad_norm", "step_time_s"} <= h.keys() for h in history)
    assert "step 2/2" in output
    assert not wait_gone(children, 5), "vLLM processes outlived the run"

    # a rerun asking for more steps resumes after checkpoint 2 and reuses the inputs
    inputs = (run_dir / "inputs.jsonl").read_text()
    rerun = autorl("--steps", "3", home=tmp_path)
    output, _ = rerun.communicate(timeout=1500)
    assert rerun.returncode == 0, output
    assert [json.loads(line)["step"] for line in (run_dir / "history.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert (run_dir / "inputs.jsonl").read_text() == inputs


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_no_server_outlives_an_interrupted_or_killed_run(tmp_path, sig):
    process = autorl("--steps", "50", home=tmp_path)
    children = wait_for_server(process)
    os.kill(process.pid, sig)
    output, _ = process.communicate(timeout=120)
    assert process.returncode != 0
    if sig == signal.SIGINT:
        assert "interrupted; rerun the same command to resume" in output
    assert not wait_gone(children, 90), f"processes left after {sig.name}"
