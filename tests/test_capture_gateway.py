"""The capture gateway (`autorl.capture.gateway`): agents that are not Python, a shell script with curl and a Node
script, have their calls recorded through a rollout's address and passed on to a model of `autorl serve` (the real
app, the tiny model trained for real, a scripted endpoint for vLLM); the group they make trains a step. And the
gateway refuses what it should: no key, an unknown rollout, another path, a bad reward, a body over its limit; a
stream reaches the agent as it arrives."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.chat.chat_completion import Choice

import autorl as art
from autorl.backends.remote.client import RemoteBackend
from autorl.capture.gateway import ROLLOUT_HEADER, CaptureGateway, post_reward
from autorl.errors import AutoRLError
from autorl.serving.auth import bearer
from tests.helpers.chat_server import chunks, completion
from tests.helpers.remote import TOKEN, trainable

AGENTS = Path(__file__).parent / "capture_agents"
ROOT = Path(__file__).resolve().parent.parent


async def run_agent(command: list[str], env: dict[str, str]) -> str:
    process = await asyncio.create_subprocess_exec(
        *command, env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


def test_a_shell_agent_and_a_node_agent_are_captured_through_the_gateway_and_train(served, tiny_model):
    backend, model = RemoteBackend(served.url, api_key=TOKEN), trainable(tiny_model)

    async def program():
        await model.register(backend)
        async with CaptureGateway(model) as gateway:
            rollouts = [gateway.rollout() for _ in range(3)]
            for bonus, rollout in enumerate(rollouts[:2]):
                await run_agent([str(AGENTS / "agent.sh")], {**rollout.env(), "BONUS": str(bonus)})
            printed = await run_agent(["node", str(AGENTS / "agent.mjs")], rollouts[2].env())
            trajectories = [gateway.finish(r.id) for r in rollouts]
        group = art.TrajectoryGroup(trajectories[:2])
        return trajectories, printed, await backend.train(model, [group], learning_rate=1e-6)

    (first, second, streamed), printed, result = asyncio.run(program())
    backend.close()
    assert [m["content"] for m in first.messages()] == ["Say hello.", "hello", "Again.", "hello"]
    assert [type(m).__name__ for m in first.messages_and_choices] == ["dict", "Choice", "dict", "Choice"]
    assert (first.reward, second.reward, first.metrics["turns"]) == (5.0, 6.0, 2.0)
    assert printed.strip() == "hello" and isinstance(streamed.messages_and_choices[-1], Choice)
    assert streamed.messages_and_choices[-1].message.content == "hello" and streamed.reward == 0.0
    assert result.step == 1 and result.metrics["trained_tokens"] > 0


def test_the_gateway_answers_only_its_key_its_rollouts_and_its_routes(chat, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(AutoRLError, match="post_reward: '' is no capture gateway rollout address"):
        post_reward(1.0)
    model = art.Model(name="m", inference_base_url=chat.base_url)

    ask = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}

    async def program() -> list[int]:
        async with CaptureGateway(model, max_body_bytes=4096) as gateway:
            rollout = gateway.rollout()
            assert gateway.url.startswith("http://127.0.0.1:")
            key = bearer(gateway.key)
            async with httpx.AsyncClient(base_url=gateway.url) as client:
                statuses = [
                    (await client.post(f"/rollouts/{rollout.id}/v1/chat/completions", json=ask)).status_code,
                    (await client.post(f"/rollouts/{rollout.id}/v1/chat/completions", json=ask, headers=bearer("no"))).status_code,
                    (await client.post("/rollouts/other/v1/chat/completions", json=ask, headers=key)).status_code,
                    (await client.post(f"/rollouts/{rollout.id}/v1/completions", json=ask, headers=key)).status_code,
                    (await client.get("/v1/models", headers=key)).status_code,
                    (await client.post(f"/rollouts/{rollout.id}/reward", json={"reward": "NaN"}, headers=key)).status_code,
                    (await client.post(f"/rollouts/{rollout.id}/reward", json={"reward": 1, "x": 2}, headers=key)).status_code,
                    (await client.post(f"/rollouts/{rollout.id}/v1/chat/completions", content=b"{" * 5000, headers=key)).status_code,
                    (await client.post("/v1/chat/completions", json=ask, headers={**key, ROLLOUT_HEADER: rollout.id})).status_code,
                ]  # fmt: skip
            await asyncio.to_thread(post_reward, 2.5, {"tries": 1}, base_url=rollout.base_url, api_key=gateway.key)
            with pytest.raises(AutoRLError, match="the gateway answered 401"):
                await asyncio.to_thread(post_reward, 1.0, base_url=rollout.base_url, api_key="not-the-key")
            recorded = gateway.finish(rollout.id)
        assert [m["content"] for m in recorded.messages()] == ["hi", "hello"]  # only the last, authorised call
        assert (recorded.reward, recorded.metrics["tries"]) == (2.5, 1.0)
        return statuses

    assert asyncio.run(program()) == [401, 401, 404, 404, 404, 400, 400, 413, 200]

    async def model_gone() -> int:
        async with CaptureGateway(art.Model(name="gone", inference_base_url="http://127.0.0.1:9/v1")) as gateway:
            rollout = gateway.rollout()
            async with httpx.AsyncClient() as client:
                answer = await client.post(
                    f"{rollout.base_url}/chat/completions", json=ask, headers=bearer(gateway.key)
                )
            assert "the model 'gone' did not answer" in answer.json()["error"]
            assert gateway.finish(rollout.id).messages_and_choices == []
            return answer.status_code

    assert asyncio.run(model_gone()) == 502
    assert chat.requests == [{"model": "m", "messages": [{"role": "user", "content": "hi"}]}]  # its own name


def test_a_stream_reaches_the_agent_through_the_gateway_as_it_arrives():
    """The model sends its first event and waits: the agent reads that event before the model goes on, and the
    whole stream is recorded once it ends."""
    release = threading.Event()
    events = chunks(completion({"model": "m"}, "hello there"))

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for index, event in enumerate(events):
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                if index == 0:
                    release.wait(30)
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *args) -> None:
            pass

    model_server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=model_server.serve_forever, daemon=True).start()
    model = art.Model(name="m", inference_base_url=f"http://127.0.0.1:{model_server.server_port}/v1")

    async def program() -> tuple[str, art.Trajectory]:
        async with CaptureGateway(model) as gateway, httpx.AsyncClient() as client:
            rollout = gateway.rollout()
            ask = {"model": "x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            url = f"{rollout.base_url}/chat/completions"
            async with client.stream("POST", url, json=ask, headers=bearer(gateway.key)) as answer:
                lines = answer.aiter_lines()
                first = await asyncio.wait_for(anext(lines), 10)  # before the model sent the rest
                release.set()
                _ = [line async for line in lines]
            return first, gateway.finish(rollout.id)

    try:
        first, recorded = asyncio.run(program())
    finally:
        release.set()
        model_server.shutdown()
    assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"] == {"role": "assistant"}
    assert recorded.messages_and_choices[-1].message.content == "hello there"


def test_agents_are_captured_through_autorl_serve_s_rollout_routes_and_train(served, chat, tiny_model):
    """The gateway on `autorl serve`: the training program opens rollouts through `RemoteBackend`, a shell agent
    and a Node agent use their addresses, an OpenAI-SDK agent whose base URL stays the server's /v1 names its
    rollout by header; the program fetches the trajectories and trains on them."""
    backend, model = RemoteBackend(served.url, api_key=TOKEN), trainable(tiny_model)

    async def program():
        await model.register(backend)
        rollouts = [await backend.capture_rollout(model) for _ in range(4)]
        assert rollouts[0].base_url == f"{served.url}/models/agent/rollouts/{rollouts[0].id}/v1"
        assert rollouts[0].env()["OPENAI_API_KEY"] == TOKEN
        for bonus, rollout in enumerate(rollouts[:2]):
            await run_agent([str(AGENTS / "agent.sh")], {**rollout.env(), "BONUS": str(bonus)})
        printed = await run_agent(["node", str(AGENTS / "agent.mjs")], rollouts[2].env())
        sdk = AsyncOpenAI(base_url=f"{served.url}/v1", api_key=TOKEN, default_headers={ROLLOUT_HEADER: rollouts[3].id})
        await sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "By header."}])
        await sdk.close()
        trajectories = [await backend.finish_rollout(model, r.id) for r in rollouts]
        with pytest.raises(AutoRLError, match=r"no rollout .* open here"):
            await backend.finish_rollout(model, rollouts[0].id)  # finished: gone
        result = await backend.train(model, [art.TrajectoryGroup(trajectories[:2])], learning_rate=1e-6)
        return trajectories, printed, result

    (first, second, streamed, by_header), printed, result = asyncio.run(program())
    backend.close()
    assert [m["content"] for m in first.messages()] == ["Say hello.", "hello", "Again.", "hello"]
    assert [type(m).__name__ for m in first.messages_and_choices] == ["dict", "Choice", "dict", "Choice"]
    assert (first.reward, second.reward, first.metrics["turns"]) == (5.0, 6.0, 2.0)
    assert printed.strip() == "hello" and streamed.messages_and_choices[-1].message.content == "hello"
    assert [m["content"] for m in by_header.messages()] == ["By header.", "hello"]
    assert result.step == 1 and result.metrics["trained_tokens"] > 0
    assert set(chat.paths) == {"/v1/chat/completions"}
    assert {request["model"] for request in chat.requests} == {"lora-0"}  # the model's own name, not the agent's


def test_autorl_capture_writes_each_rewarded_rollout_and_the_rest_at_its_end(chat, tmp_path, monkeypatch):
    """`autorl capture` as a user runs it: a proxy in front of a model, printing the address and key an agent
    uses; an agent names its own rollouts; each is written to --out when its reward is posted, those without one
    when the proxy stops."""
    out = tmp_path / "captured.jsonl"
    monkeypatch.setenv("UPSTREAM_KEY", "the-upstream-key")
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "capture", f"m@{chat.base_url}", "--out", str(out),
         "--api-key-env", "UPSTREAM_KEY"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        env = dict(line.split("=", 1) for line in printed_env(process))
        assert env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:") and env["OPENAI_BASE_URL"].endswith(
            "/rollouts/1/v1"
        )
        base = env["OPENAI_BASE_URL"].removesuffix("/rollouts/1/v1")
        for name, bonus in (("a", 0), ("b", 1)):
            agent_env = {"OPENAI_BASE_URL": f"{base}/rollouts/{name}/v1", "OPENAI_API_KEY": env["OPENAI_API_KEY"]}
            asyncio.run(run_agent([str(AGENTS / "agent.sh")], {**agent_env, "BONUS": str(bonus)}))
        rewarded = [json.loads(line) for line in out.read_text().splitlines()]
        assert [(t["metadata"]["rollout"], t["reward"]) for t in rewarded] == [("a", 5.0), ("b", 6.0)]
        unrewarded = httpx.post(
            f"{base}/rollouts/c/v1/chat/completions", headers=bearer(env["OPENAI_API_KEY"]),
            json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
        )  # fmt: skip
        assert unrewarded.status_code == 200
        assert httpx.post(f"{base}/rollouts/a/reward", json={"reward": 1}).status_code == 401  # no key
    finally:
        process.send_signal(signal.SIGINT)
        said = process.communicate(timeout=30)[0]
    assert process.returncode == 0, said
    written = [art.Trajectory.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [(t.metadata["rollout"], t.metadata["reward_posted"]) for t in written] == [
        ("a", True), ("b", True), ("c", False)
    ]  # fmt: skip
    assert [m["content"] for m in written[2].messages()] == ["hi", "hello"]
    assert "the-upstream-key" not in said + out.read_text()
    assert all(headers["authorization"] == "Bearer the-upstream-key" for headers in chat.headers)
    assert (out.stat().st_mode & 0o777) == 0o600


def printed_env(process: subprocess.Popen) -> list[str]:
    """The `NAME=value` lines `autorl capture` prints before it serves."""
    lines: list[str] = []
    while len(lines) < 2:
        line = process.stdout.readline()
        assert line, "autorl capture ended before it printed its address"
        if line.startswith(("OPENAI_BASE_URL=", "OPENAI_API_KEY=")):
            lines.append(line.strip())
    return lines
