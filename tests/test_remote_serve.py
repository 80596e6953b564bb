"""A real `autorl serve` subprocess on 127.0.0.1 with the embedded model on vLLM: an ART-style program
(tests/art_programs/dataset_loop.py, unchanged) trains two steps through `RemoteBackend`, and the server is
SIGKILLed in the middle of the second step and started again. The client's retries reach the restarted
server, which resumes the model from its newest checkpoint and trains the step once: the history shows each
step once. The fast cases (token, size limit, 409, bad requests, a disconnect mid-step) are in
tests/test_remote_backend.py."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from art_programs import dataset_loop

from autorl.backends.remote.client import RemoteBackend
from autorl.backends.remote.served import STEP_IDS_FILE
from autorl.backends.run_dir import read_history
from tests.helpers.limits import scaled
from tests.helpers.remote import OUTSIDE, free_port, raw_post

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CHAT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}


class Serve:
    """`autorl serve` as a user starts it (the token in the environment, never on the command line)."""

    def __init__(self, home: Path, port: int, token: str):
        self.home, self.port, self.token = home, port, token
        self.url = f"http://127.0.0.1:{port}"
        self.starts = 0
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.starts += 1
        log = open(self.home / f"serve-{self.starts}.log", "w")  # noqa: SIM115 (the child holds it)
        command = [sys.executable, "-m", "pipelines.cli", "serve", "--port", str(self.port), "--home", str(self.home)]
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "AUTORL_TOKEN": self.token}
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, (self.home / f"serve-{self.starts}.log").read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "autorl serve did not answer /health in 60 s"
            time.sleep(0.2)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # Ctrl-C's way out: the models' vLLM servers stop
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.mark.timeout(450)  # 213 s measured on a loaded 2-core machine (vLLM starts of 63-67 s): two starts, two steps
def test_an_art_program_trains_through_autorl_serve_which_is_killed_mid_step_and_restarted(tmp_path):
    token = secrets.token_urlsafe(32)
    server = Serve(tmp_path, free_port(), token)
    run_dir = tmp_path / "models" / "art-programs" / "agent"
    killed = threading.Event()

    def kill_during_the_second_step() -> None:
        deadline = time.monotonic() + 300
        while len(read_history(run_dir, STEP_IDS_FILE)) < 2:  # step 2's id is recorded as it starts training
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        server.kill()
        killed.set()
        server.start()

    async def program():
        backend = RemoteBackend(server.url, api_key=token)  # the one line that differs from LocalBackend()
        model = await dataset_loop.main(backend)
        reply = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(), messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
        )
        backend.close()
        return model, reply

    try:
        server.start()
        killer = threading.Thread(target=kill_during_the_second_step, daemon=True)
        killer.start()
        model, reply = asyncio.run(program())
        killer.join(60)
        assert killed.is_set() and server.starts == 2
        assert model.get_inference_name() == "agent@0002" and reply.choices
        history = read_history(run_dir)
        assert [h["step"] for h in history] == [1, 2]  # each step once: none lost, none trained twice
        ids = [r["step_id"] for r in read_history(run_dir, STEP_IDS_FILE)]
        assert len(set(ids)) == 2 and ids[1] == ids[-1]  # step 2 was sent again with its own id
        assert token not in "".join(p.read_text() for p in tmp_path.glob("serve-*.log"))
    finally:
        server.stop()


def dev_endpoints_never_answer(server: Serve, model: str) -> None:
    """Through the server, every spelling of vLLM's development endpoints and LoRA loading is 404 (its vLLM
    serves merged on CPU: `/collective_rpc`, `/pause`, `/sleep` are on), and inference still answers."""
    body = {"model": model, "method": "save_sharded_state", "args": ["/tmp/x"], "lora_name": "x", "lora_path": "/"}
    refused = {path: raw_post(server.port, path, body, server.token) for path in OUTSIDE}
    assert {path: answer for path, answer in refused.items() if answer[0] != 404} == {}
    status, text = raw_post(server.port, "/v1/chat/completions", {**CHAT, "model": model}, server.token)
    assert status == 200 and json.loads(text)["choices"], text
    assert "collective_rpc" not in (server.home / "serve-1.log").read_text()


REMOTE_TASK = """
description = "Answer in capital letters only."
system_prompt = "You answer every message in capital letters only."
inputs_file = "inputs.jsonl"
"""
REMOTE_INPUTS = [("Say hello.", "train"), ("Name a fruit.", "train"), ("Name a colour.", "val"), ("Say bye.", "val")]


@pytest.mark.timeout(600)  # ~150 s on 2 cores: the server's vLLM start for the run's model, baseline, a step, evaluate
def test_autorl_run_with_backend_trains_on_the_server_and_gets_its_checkpoint(tmp_path):
    """`autorl run --backend URL` on the "laptop" (its own home), `autorl serve` on the "GPU box" (another home):
    the run finishes with no vLLM server of its own, the step is trained once on the server, and the laptop's
    run directory holds its history and checkpoint (copied back) as a local run's would; the token is in no
    file either side wrote. Then the server's vLLM is probed for its development endpoints through the
    proxy (`dev_endpoints_never_answer`)."""
    token = secrets.token_urlsafe(32)
    server = Serve(tmp_path / "server-home", free_port(), token)
    server.home.mkdir()
    laptop = tmp_path / "laptop"
    (tmp_path / "upper.toml").write_text(REMOTE_TASK)
    (tmp_path / "inputs.jsonl").write_text(
        "".join(json.dumps({"input": i, "split": s}) + "\n" for i, s in REMOTE_INPUTS)
    )
    command = [sys.executable, "-m", "pipelines.cli", "run", str(tmp_path / "upper.toml"), "--home", str(laptop),
               "--name", "upper", "--backend", server.url, "--steps", "1", "--group-size", "2",
               "--groups-per-step", "1", "--max-tokens", "16", "--eval-samples", "2", "--learnability-groups", "1",
               "--judge", "benchmarks.perf.learning_tasks.judges:uppercase", "--no-wandb"]  # fmt: skip
    try:
        server.start()
        done = subprocess.run(
            command,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=scaled(540),
            env={**os.environ, "AUTORL_TOKEN": token},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        run = json.loads((laptop / "runs" / "upper" / "run.json").read_text())
        assert run["status"] == "done" and run["server_starts"] == 0  # none on the laptop
        (remote,) = (server.home / "models").glob("train/*")  # the run's model, trained there
        assert [h["step"] for h in read_history(remote)] == [1]
        here = laptop / "runs" / "upper"
        assert [h["step"] for h in read_history(here)] == [1]  # the history and the checkpoint, copied back
        copied = here / "checkpoints" / "0001" / "adapter_model.safetensors"
        assert copied.read_bytes() == (remote / "checkpoints" / "0001" / "adapter_model.safetensors").read_bytes()
        assert "restarting it" not in (server.home / "serve-1.log").read_text()  # its vLLM never died
        dev_endpoints_never_answer(server, remote.name)
        written = [p for p in [*laptop.rglob("*"), *server.home.rglob("*")] if p.is_file() and not p.is_symlink()]
        assert not [p for p in written if token.encode() in p.read_bytes()]
    finally:
        server.stop()
