"""The vLLM launcher (`autorl.serving.launcher`): a server it forks answers as one started alone, stops when its
stand-in is told to, and does not outlive the process that asked for it, though it is the launcher's child; a
request the launcher cannot run as the server's own command would run, or no launcher at all, starts the server
as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from autorl.serving import vllm_entry
from autorl.serving.config import ServerConfig
from autorl.serving.die_with_parent import GRACE_S
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.environment import LAUNCHER_ENV, openmp_wait, shared_environment
from autorl.serving.launcher import attached, declined, start_launcher
from autorl.serving.vllm_server import VLLMServer
from tests.helpers.limits import scaled
from tests.helpers.processes import alive, children, descendants, wait_gone, with_command_line

OWNER = """
import sys, time
from pathlib import Path
from autorl.serving.config import ServerConfig
from autorl.serving.vllm_server import VLLMServer
VLLMServer(Path(sys.argv[1]), "m", Path(sys.argv[2]), ServerConfig(enforce_eager=True)).start()
print("up", flush=True)
time.sleep(600)
"""
"""A process that starts a server (through the launcher its environment names) and waits to be killed."""


def test_a_request_is_declined_unless_the_launcher_runs_it_as_its_command_would(monkeypatch):
    env = shared_environment()
    for key, value in {"LD_PRELOAD": env.get("LD_PRELOAD", ""), **openmp_wait(env)}.items():
        monkeypatch.setenv(key, value)  # as in the launcher, started with the servers' shared environment
    argv = [sys.executable, "-m", vllm_entry.__name__, "--model", "m"]
    assert declined({"argv": argv, "env": env, "cwd": "/"}) is None
    other_python = ["/usr/bin/python3", *argv[1:]]
    assert "only" in declined({"argv": other_python, "env": env, "cwd": "/"})
    spawned = [sys.executable, "-m", vllm_entry.VLLM_SERVER, "--model", "m"]
    assert "only" in declined({"argv": spawned, "env": env, "cwd": "/"})
    other_preloads = {**env, "LD_PRELOAD": "/other/libgomp.so"}
    assert "preloads" in declined({"argv": argv, "env": other_preloads, "cwd": "/"})
    other_openmp = {**env, "OMP_WAIT_POLICY": "ACTIVE"}
    assert "OpenMP wait settings" in declined({"argv": argv, "env": other_openmp, "cwd": "/"})
    other_autorl = {**env, "PYTHONPATH": "/elsewhere"}
    assert "autorl from elsewhere" in declined({"argv": argv, "env": other_autorl, "cwd": "/"})
    assert declined({"argv": "python", "env": env, "cwd": "/"}) == "a malformed request"
    assert declined([argv, env]) == "a malformed request"


def test_with_no_launcher_listening_the_stand_in_runs_the_command_itself(tmp_path):
    command = [sys.executable, "-c", "import sys; print('ran'); sys.exit(3)"]
    done = subprocess.run(attached(command, str(tmp_path / "socket")), capture_output=True, text=True, timeout=30)
    assert done.returncode == 3 and done.stdout == "ran\n"
    assert "no launcher at" in done.stderr and "starting the server directly" in done.stderr


def launched(launcher_pid: int, before: set[int]) -> int:
    """The one server the launcher forked since `before` (its children then)."""
    (server,) = children(launcher_pid) - before
    return server


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_launched_server_answers_stops_and_ends_with_the_process_that_asked_for_it(tmp_path, monkeypatch):
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)  # this test's own launcher, not the suite's
    model = resolve_base_model(DEFAULT_BASE_MODEL)
    launcher = start_launcher()
    try:
        server = VLLMServer(model, "m", tmp_path / "server.log", ServerConfig(enforce_eager=True))
        server.start()
        pid = launched(launcher.process.pid, set())  # the launcher's child, not its supervisor's
        assert pid not in descendants(server._process.pid)
        assert with_command_line({pid}, vllm_entry.__name__.encode())  # `ps` shows it as the server it is
        reply = httpx.post(server.base_url + "/chat/completions", headers=server.headers, timeout=scaled(60),
                           json={"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})  # fmt: skip
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] >= 1
        group = alive({pid} | descendants(pid))  # the server and its engine process
        server.stop()
        assert not wait_gone(group, 10), "a launched server outlived its stop"

        owner = subprocess.Popen(  # inherits LAUNCHER_ENV: its server is forked by the launcher too
            [sys.executable, "-c", OWNER, str(model), str(tmp_path / "owner.log")], stdout=subprocess.PIPE, text=True
        )
        assert "up\n" in iter(owner.stdout.readline, "")  # once its server answers its health check
        pid = launched(launcher.process.pid, set())
        group = alive({pid} | descendants(pid))
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert not wait_gone(group, GRACE_S + 10), "a launched server outlived the process that asked for it"
    finally:
        launcher.stop()
    assert launcher.process.poll() is not None and LAUNCHER_ENV not in os.environ
