"""A training step through `autorl serve` (`RemoteBackend`) against the same step on `LocalBackend`, in one run.

Both sides: the embedded SmolLM2-135M-Instruct, the default trainer and server settings of this machine
(merged serving on CPU), the same groups each step: 2 groups of G=8 rollouts of up to 64 tokens with
logprobs, sampled once from the local policy's vLLM server, rewards the share of the letter "e". Ours:
`model.train()` through a `RemoteBackend` to a real `autorl serve` subprocess on 127.0.0.1 (its own vLLM
server and trainer); the baseline: `model.train()` on a `LocalBackend` in this process. They alternate step
by step; the first step of each (the trainer's build) is a warm-up; medians of the rest. Also reported:
the bytes a remote step sends (the gzip-compressed request) and the JSON before compression.

    flock /tmp/autorl-heavy.lock python benchmarks/perf/perf_remote.py   # ~3-4 min on 2 cores
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, print_table, ratio_entry, summary, write_result

import autorl as art
from autorl.backends.remote.wire import TrainRequest
from autorl.serving.embedded import DEFAULT_BASE_MODEL

GROUPS, GROUP_SIZE, MAX_TOKENS = 2, 8, 64
PROMPTS = ["Describe the sea in one sentence.", "Name three things you see every day."]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(home: Path, port: int, token: str) -> subprocess.Popen:
    """`autorl serve` as a user starts it; returns once /health answers."""
    import httpx

    log = open(home / "serve.log", "w")  # noqa: SIM115 (the child holds it)
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "serve", "--port", str(port), "--home", str(home)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "AUTORL_TOKEN": token},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.3)
    raise SystemExit(f"autorl serve did not start; see {home / 'serve.log'}")


async def sample_groups(model: art.TrainableModel) -> list[art.TrajectoryGroup]:
    client = model.openai_client()

    async def rollout(prompt: str) -> art.Trajectory:
        messages = [{"role": "user", "content": prompt}]
        response = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, max_tokens=MAX_TOKENS, logprobs=True, temperature=1.0
        )
        text = response.choices[0].message.content or ""
        return art.Trajectory(
            messages_and_choices=[*messages, response.choices[0]], reward=text.count("e") / max(len(text), 1)
        )

    return await art.gather_trajectory_groups(
        [art.TrajectoryGroup(rollout(p) for _ in range(GROUP_SIZE)) for p in PROMPTS[:GROUPS]], pbar_desc="rollouts"
    )


async def measure(repeats: int, home: Path) -> dict:
    token, port = secrets.token_urlsafe(32), free_port()
    (home / "server").mkdir()
    server = start_server(home / "server", port, token)
    local_backend = art.LocalBackend(home / "local")
    remote_backend = art.RemoteBackend(f"http://127.0.0.1:{port}", api_key=token)
    local = art.TrainableModel(name="perf-local", project="perf", base_model=DEFAULT_BASE_MODEL)
    remote = art.TrainableModel(name="perf-remote", project="perf", base_model=DEFAULT_BASE_MODEL)
    try:
        started = time.monotonic()
        await local.register(local_backend)
        await remote.register(remote_backend)
        print(f"both registered in {time.monotonic() - started:.0f} s", flush=True)
        groups = await sample_groups(local)
        json_bytes = len(TrainRequest(groups=groups, step_id="x" * 32).model_dump_json().encode())
        times: dict[str, list[float]] = {"local": [], "remote": []}
        sent: list[int] = []
        for step in range(repeats + 1):
            for side, model in (("local", local), ("remote", remote)):
                before, started = remote_backend.bytes_sent, time.perf_counter()
                await model.train(groups)
                seconds = time.perf_counter() - started
                print(f"step {step + 1} {side}: {seconds:.2f} s", flush=True)
                if step:  # the first: the trainer's build
                    times[side].append(seconds)
                    if side == "remote":
                        sent.append(remote_backend.bytes_sent - before)
        return {"times": times, "sent_bytes": sent, "json_bytes": json_bytes}
    finally:
        remote_backend.close()
        local_backend.close()
        server.terminate()  # SIGTERM: the server stops its vLLM
        server.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=4, help="Measured steps per side (after one warm-up).")
    args = parser.parse_args()
    begun = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="perf-remote-") as home:
        measured = asyncio.run(measure(args.repeats, Path(home)))
    local, remote = summary(measured["times"]["local"]), summary(measured["times"]["remote"])
    conditions = (
        f"SmolLM2-135M, {GROUPS} groups x G={GROUP_SIZE}, <= {MAX_TOKENS} tokens with logprobs, default trainer "
        f"and server settings; autorl serve on 127.0.0.1 in a subprocess; medians of {args.repeats} steps after a warm-up"
    )
    rows = [
        ratio_entry(
            "training step, RemoteBackend vs LocalBackend",
            remote["median"],
            local["median"],
            "s",
            None,
            False,
            conditions,
        )
    ]
    print_table(rows)
    sent = int(statistics.median(measured["sent_bytes"]))
    print(f"bytes sent per remote step: {sent} (gzip; {measured['json_bytes']} as JSON)")
    path = write_result(
        "remote",
        {
            "ratios": rows,
            "local_step_s": local,
            "remote_step_s": remote,
            "remote_bytes_sent_per_step": sent,
            "train_request_json_bytes": measured["json_bytes"],
            "conditions": conditions,
        },
        begun,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
