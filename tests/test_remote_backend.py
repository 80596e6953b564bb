"""`autorl serve`'s app and `RemoteBackend`, fast: the real FastAPI app on 127.0.0.1 (uvicorn in a thread) over a
`LocalBackend` whose models train for real on the tiny model and are served by a scripted OpenAI endpoint
in place of vLLM (`ScriptedPlacement`). The token, the size limit, bad requests, one training client per
model, a step id trained once (a disconnect mid-step, a restart after one), a server that is down, and the
token's sources. The same with `autorl serve` and vLLM on the embedded model: tests/test_remote_serve.py."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import threading
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

import autorl as art
from autorl.backends.remote.client import RemoteBackend
from autorl.backends.remote.config import MODELS_DIR, ServeConfig, resolve_token
from autorl.backends.remote.served import STEP_IDS_FILE, Refused
from autorl.backends.remote.wire import CLIENT_HEADER, GZIP_OVER_BYTES, TrainRequest
from autorl.backends.run_dir import LOG_HISTORY_FILE, read_history
from autorl.errors import AutoRLError
from autorl.serving.auth import bearer
from autorl.training.checkpoints import METRICS_FILE, complete_checkpoints
from pipelines.cli import app as cli
from tests.helpers.cli import error_line
from tests.helpers.remote import MAX_BODY, TOKEN, Harness, call, register_body, trainable
from tests.helpers.training import groups

LR = art.TrainConfig(learning_rate=1e-9)


async def disconnect_mid_step(url: str, body: bytes, run_dir: Path) -> None:
    """Send a training request and drop the connection once the server started that step."""
    async with httpx.AsyncClient(timeout=60) as client:
        sent = asyncio.create_task(
            client.post(url, content=body, headers={**bearer(TOKEN), CLIENT_HEADER: "a-test-client"})
        )
        while not (run_dir / STEP_IDS_FILE).exists():
            await asyncio.sleep(0.01)
        assert not read_history(run_dir)  # the step runs (building the trainer alone takes longer than this)
        sent.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sent


def train_body(tokenizer, step_id: str) -> bytes:
    return TrainRequest(groups=groups(tokenizer), config=LR, step_id=step_id).model_dump_json().encode()


def test_a_program_trains_logs_serves_and_downloads_through_the_remote_backend(served, chat, tiny_model, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    backend = RemoteBackend(served.url, api_key=TOKEN)
    model = trainable(tiny_model)

    async def program():
        await model.register(backend)
        named = model.get_inference_name()
        reply = await model.openai_client().chat.completions.create(
            model=named, messages=[{"role": "user", "content": "hi"}]
        )
        for _ in range(2):
            await model.delete_checkpoints()
            await model.train(groups(tokenizer), config=LR)
        logged = await model.log([art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}], reward=0.5)])
        earlier = await model.openai_client().chat.completions.create(
            model="agent@0001", messages=[{"role": "user", "content": "hi"}]
        )
        newest = await model.openai_client().chat.completions.create(
            model="agent", messages=[{"role": "user", "content": "hi"}]
        )
        listed = [m.id async for m in model.openai_client().models.list()]
        steps = await backend.list_checkpoints(model)
        path = await backend.download_checkpoint(model, path=tmp_path / "downloaded")
        return named, reply, logged, earlier, newest, listed, steps, path, await model.get_step()

    named, reply, logged, earlier, newest, listed, steps, path, step = asyncio.run(program())
    assert named == "agent@0000" and reply.choices[0].message.content == "hello"
    assert step == 2 and model.get_inference_name() == "agent@0002" and steps == [1, 2]
    # the scripted vLLM got the name it serves each checkpoint under, and its own key, never the client's
    assert [r["model"] for r in chat.requests] == ["lora-0", "lora-1", "lora-2"]
    assert {h["authorization"] for h in chat.headers} == {"Bearer the-vllm-servers-own-key"}
    assert earlier.model == "lora-1" and newest.model == "lora-2"
    assert listed == ["agent", "agent@0000", "agent@0001", "agent@0002"]
    assert logged["reward"] == 0.5
    run_dir = served.served.backend.run_dir(model)
    assert [r["step"] for r in read_history(run_dir)] == [1, 2]
    assert [(r["step"], r["val/reward"]) for r in read_history(run_dir, LOG_HISTORY_FILE)] == [(2, 0.5)]
    assert (path / "adapter_config.json").is_file() and path.name == "0002"
    assert (run_dir / "checkpoints" / "0002").is_dir()
    backend.close()


def test_a_mirror_holds_the_servers_history_and_checkpoints_after_each_change(served, tiny_model, tmp_path):
    """What `autorl run --backend` reads: the run directory copied back, as the server keeps it."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    backend = RemoteBackend(served.url, api_key=TOKEN, mirror=tmp_path / "mirror", server={"max_lora_rank": 16})
    model, there = trainable(tiny_model), served.served.backend.run_dir(trainable(tiny_model))
    here = backend.run_dir(model)
    assert here == tmp_path / "mirror" / "remote" / "agent"

    def copied() -> tuple[list[int], list[int]]:
        return [r["step"] for r in read_history(here)], [s for s, _ in complete_checkpoints(here / "checkpoints")]

    async def program() -> list:
        seen = []
        await model.register(backend)
        seen.append(copied())
        for _ in range(3):
            await model.train(groups(tokenizer), config=LR)
            seen.append(copied())
        await model.delete_checkpoints("train/reward", keep="latest")
        seen.append(copied())
        return seen

    assert asyncio.run(program()) == [([], []), ([1], [1]), ([1, 2], [1, 2]), ([1, 2, 3], [1, 2, 3]), ([1, 2, 3], [3])]
    assert read_history(here) == read_history(there)
    for name in ("adapter_model.safetensors", METRICS_FILE):  # the files themselves, whole
        assert (here / "checkpoints" / "0003" / name).read_bytes() == (
            there / "checkpoints" / "0003" / name
        ).read_bytes()
    assert served.served.models["agent"].server == {"max_lora_rank": 16}  # what the backend asked for each model
    backend.close()

    fresh = RemoteBackend(served.url, api_key=TOKEN, mirror=tmp_path / "elsewhere")  # a new machine: copied at register
    asyncio.run(trainable(tiny_model).register(fresh))
    assert [r["step"] for r in read_history(fresh.run_dir(model))] == [1, 2, 3]
    with pytest.raises(AutoRLError, match="keeps no copy"):
        RemoteBackend(served.url, api_key=TOKEN).run_dir(model)
    with pytest.raises(AutoRLError, match=r"may not set \['port'\]"):
        RemoteBackend(served.url, api_key=TOKEN, server={"port": 8000})


def test_the_check_before_a_run_names_a_server_that_is_down_or_refuses_the_token(served):
    RemoteBackend(served.url, api_key=TOKEN).check_reachable()
    with pytest.raises(AutoRLError, match=r"refused the token: set AUTORL_TOKEN to the server's$"):
        RemoteBackend(served.url, api_key="not-the-token").check_reachable()
    down = f"http://127.0.0.1:{served.port}"
    served.stop()
    with pytest.raises(AutoRLError, match=rf"^autorl server {down} does not answer \(ConnectError\)"):
        RemoteBackend(down, api_key=TOKEN).check_reachable()


def test_every_path_but_health_needs_the_token(served):
    assert call("GET", f"{served.url}/health", key=None).status_code == 200
    for method, path in [("GET", "/models/agent/step"), ("POST", "/models"), ("GET", "/v1/models"),
                         ("POST", "/v1/chat/completions"), ("GET", "/docs"), ("GET", "/openapi.json")]:  # fmt: skip
        for key in (None, "wrong-" + TOKEN, TOKEN[:-1]):
            response = call(method, f"{served.url}{path}", key=key, content=b"{}")
            assert response.status_code == 401, (path, key)
            assert TOKEN not in response.text
    with pytest.raises(
        AutoRLError, match=r"^autorl server http://127\.0\.0\.1:\d+/models/x/step: Unauthorized.*\(HTTP 401\)$"
    ):
        asyncio.run(
            RemoteBackend(served.url, api_key="not-the-token", retries=0).get_step(art.TrainableModel(name="x"))
        )


def test_a_body_over_the_limit_is_refused_413_declared_or_streamed(served):
    big = b"x" * (MAX_BODY + 1)
    response = call("POST", f"{served.url}/models", content=big)
    assert response.status_code == 413 and "--max-body-mb" in response.json()["error"]

    def chunks():
        for _ in range(4):
            yield b"y" * (MAX_BODY // 2)

    response = call("POST", f"{served.url}/models/agent/train", content=chunks())  # chunked: no Content-Length
    assert response.status_code == 413


def test_a_bad_request_is_a_4xx_with_one_line(served, tiny_model, tokenizer):
    cases = [
        ("/models", b"not json", 400, "json"),
        ("/models", json.dumps(register_body(tiny_model, name="../etc")).encode(), 400, "model name '../etc'"),
        ("/models", json.dumps(register_body(tiny_model, server={"host": "0.0.0.0"})).encode(), 400, "server.host"),
        ("/models", json.dumps(register_body(tiny_model, server={"nope": 1})).encode(), 400, "'nope' is not a ServerConfig field"),
        ("/models/ghost/train", train_body(tokenizer, "a" * 16), 404, "'ghost' is not served here"),
        ("/v1/chat/completions", b"[]", 400, "needs a JSON object"),
        ("/v1/chat/completions", b'{"model": "ghost"}', 404, "'ghost' is not served here"),
    ]  # fmt: skip
    for path, body, status, says in cases:
        response = call("POST", f"{served.url}{path}", content=body)
        assert response.status_code == status, (path, response.text)
        line = response.json()["error"]
        assert says.lower() in line.lower() and "\n" not in line, line
    assert call("POST", f"{served.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    for path, body, says in [
        ("/models/agent/train", b'{"groups": []}', "step_id: Field required"),
        (
            "/models/agent/train",
            json.dumps({"groups": [], "step_id": "x/../y1234"}).encode(),
            "step_id: String should match",
        ),
        ("/models/agent/delete_checkpoints", b'{"keep": "sometimes"}', "keep='sometimes'"),
        ("/models/agent/serve", b'{"step": 7}', "has no checkpoint 0007"),
        ("/v1/chat/completions", b'{"model": "agent@latest"}', "expected NAME@NNNN"),
    ]:
        response = call("POST", f"{served.url}{path}", content=body)
        assert response.status_code == 400 and says in response.json()["error"], response.text
    response = call("POST", f"{served.url}/models/agent/train", content=b"{}", headers={CLIENT_HEADER: ""})
    assert response.status_code == 400 and CLIENT_HEADER in response.json()["error"]


def test_one_client_trains_a_model_at_a_time_until_it_closes(served, tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    first, second = RemoteBackend(served.url, api_key=TOKEN), RemoteBackend(served.url, api_key=TOKEN, retries=0)
    mine, theirs = trainable(tiny_model), trainable(tiny_model)

    async def scenario():
        await mine.register(first)
        await theirs.register(second)
        await mine.train(groups(tokenizer), config=LR)
        with pytest.raises(AutoRLError, match=r"being trained by another client .*\(HTTP 409\)$"):
            await theirs.train(groups(tokenizer), config=LR)
        with pytest.raises(AutoRLError, match=r"\(HTTP 409\)$"):
            await theirs.delete_checkpoints()
        assert await theirs.get_step() == 1  # reading and inference stay open to every client
        with pytest.raises(AutoRLError, match=r"\(HTTP 409\)$"):  # a log's val/reward would choose the best step
            await theirs.log([art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}], reward=1.0)])
        await mine.log([art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}], reward=1.0)])
        first.close()
        return await theirs.train(groups(tokenizer), config=LR)

    assert asyncio.run(scenario())["step"] == 2


def test_a_step_id_is_trained_once_after_a_disconnect_mid_step_or_a_restart(tmp_path, chat, tiny_model, tokenizer):
    harness = Harness(tmp_path, chat)
    assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    url = f"{harness.url}/models/agent/train"
    run_dir = tmp_path / MODELS_DIR / "remote" / "agent"
    asyncio.run(disconnect_mid_step(url, train_body(tokenizer, "step-one-id"), run_dir))  # the step goes on
    again = call("POST", url, content=train_body(tokenizer, "step-one-id"))  # its retry gets that step
    assert again.status_code == 200 and again.json()["metrics"]["step"] == 1
    second = call("POST", url, content=train_body(tokenizer, "step-two-id")).json()
    assert second["metrics"]["step"] == 2 and second["inference_name"] == "agent@0002"
    harness.stop()

    restarted = Harness(tmp_path, chat, port=harness.port)  # a new process's state: registry and run directory only
    try:
        retried = call("POST", url, content=train_body(tokenizer, "step-two-id"))  # the answer was lost
        assert retried.json() == second  # from the record: the model was resumed, the step not trained again
        assert call("GET", f"{restarted.url}/models/agent/step").json() == {"step": 2}
        run_dir = restarted.served.backend.run_dir(restarted.served.models["agent"])
        assert [r["step"] for r in read_history(run_dir)] == [1, 2]
        third = call("POST", url, content=train_body(tokenizer, "step-three-id")).json()
        assert third["metrics"]["step"] == 3
    finally:
        restarted.stop()


def test_a_client_started_again_with_its_id_gets_the_step_its_killed_self_asked_for(served, tiny_model):
    """`autorl run --backend` killed mid-step and run again: the same client id asks for the same step, so it gets
    that step (still training when it asks) instead of a second one; a step after it trains as usual."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    run_dir = served.served.backend.run_dir(trainable(tiny_model))
    # the killed step trains only once its id was asked for again, as a step longer than a client's restart
    # does: else, on a loaded machine, it could end first, and the restarted client rightly asks for step 2
    asked_again, asked = threading.Event(), []
    receive, train_step = served.served.train, served.served.backend.train_step

    async def receiving(name, request, client):
        asked.append(request.step_id)
        if asked.count("the_laptops_run-1") == 2:
            asked_again.set()
        return await receive(name, request, client)

    async def held_step(*args, **kwargs):
        assert await asyncio.to_thread(asked_again.wait, 60), "the restarted client never asked for its step"
        return await train_step(*args, **kwargs)

    served.served.train, served.served.backend.train_step = receiving, held_step

    async def killed_mid_step() -> None:
        model = trainable(tiny_model)
        await model.register(RemoteBackend(served.url, api_key=TOKEN, client_id="the_laptops_run"))
        step = asyncio.create_task(model.train(groups(tokenizer), config=LR))
        while not (run_dir / STEP_IDS_FILE).exists():  # the server started the step
            await asyncio.sleep(0.01)
        step.cancel()  # the client dies: its connection with it
        with pytest.raises(asyncio.CancelledError):
            await step

    async def again() -> list[int]:
        model = trainable(tiny_model)
        await model.register(RemoteBackend(served.url, api_key=TOKEN, client_id="the_laptops_run"))
        first = await model.train(groups(tokenizer), config=LR)
        second = await model.train(groups(tokenizer), config=LR)
        return [first["step"], second["step"]]

    asyncio.run(killed_mid_step())
    assert asyncio.run(again()) == [1, 2]
    assert [r["step"] for r in read_history(run_dir)] == [1, 2]  # each step once
    assert [r["step_id"] for r in read_history(run_dir, STEP_IDS_FILE)] == ["the_laptops_run-1", "the_laptops_run-2"]
    with pytest.raises(AutoRLError, match="client_id: 8-48 letters"):
        RemoteBackend(served.url, api_key=TOKEN, client_id="no/slashes")


def test_the_client_retries_until_a_restarted_server_answers_then_says_which_url_is_down(tmp_path, chat, tiny_model):
    harness = Harness(tmp_path, chat)
    backend = RemoteBackend(harness.url, api_key=TOKEN, retries=5, backoff_s=0.2)
    model = trainable(tiny_model)
    asyncio.run(model.register(backend))
    harness.stop()
    later = threading.Timer(0.5, lambda: setattr(later, "harness", Harness(tmp_path, chat, port=harness.port)))
    later.start()
    try:
        assert asyncio.run(model.get_step()) == 0  # refused, then answered by the restarted server
    finally:
        later.join()
        later.harness.stop()
    down = RemoteBackend(harness.url, api_key=TOKEN, retries=2, backoff_s=0.01)
    with pytest.raises(AutoRLError) as failed:
        asyncio.run(model.register(down))
    assert str(failed.value).startswith(f"autorl server {harness.url}/models failed after 3 tries (ConnectError")


def test_merged_serving_serves_the_newest_checkpoint_only(tmp_path, chat, tiny_model):
    harness = Harness(tmp_path, chat, serving="merged")
    try:
        call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model)))
        served = harness.served
        model = served.models["agent"]
        assert asyncio.run(served.target("agent@0000")) == (model, "lora-0")
        with pytest.raises(Refused, match=r"merged into the weights.*--lora-serving adapter"):
            asyncio.run(served.target("agent@0003"))
        listed = call("GET", f"{harness.url}/v1/models").json()["data"]
        assert [m["id"] for m in listed] == ["agent", "agent@0000"]
    finally:
        harness.stop()


def test_the_token_comes_from_a_file_the_environment_or_the_home_and_a_public_host_needs_one(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTORL_TOKEN", raising=False)
    token, source = resolve_token(ServeConfig(home=tmp_path))
    made = tmp_path / "serve" / "token"
    assert source == str(made) and made.read_text().strip() == token and made.stat().st_mode & 0o777 == 0o600
    assert resolve_token(ServeConfig(home=tmp_path)) == (token, source)  # kept: a restart takes the same one
    with pytest.raises(AutoRLError, match=r"--host 0.0.0.0 is not loopback: give the token"):
        resolve_token(ServeConfig(home=tmp_path, host="0.0.0.0"))
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    assert resolve_token(ServeConfig(home=tmp_path, host="0.0.0.0")) == (TOKEN, "AUTORL_TOKEN")
    shared = tmp_path / "shared-token"
    shared.write_text(TOKEN)
    os.chmod(shared, 0o644)
    with pytest.raises(AutoRLError, match=r"readable by other users .*chmod 600"):
        resolve_token(ServeConfig(home=tmp_path, token_file=shared))
    os.chmod(shared, 0o600)
    assert resolve_token(ServeConfig(home=tmp_path, token_file=shared)) == (TOKEN, str(shared))
    monkeypatch.setenv("AUTORL_TOKEN", "short")
    with pytest.raises(AutoRLError, match="shorter than 16"):
        resolve_token(ServeConfig(home=tmp_path))


def test_autorl_serve_refuses_a_public_host_without_a_token_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTORL_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--home", str(tmp_path)])
    assert "is not loopback: give the token" in error_line(result)
    assert not (tmp_path / "serve" / "token").exists()


def test_remote_backend_needs_a_url_and_a_token_and_answers_to_arts_names(monkeypatch):
    monkeypatch.delenv("AUTORL_URL", raising=False)
    monkeypatch.delenv("AUTORL_TOKEN", raising=False)
    with pytest.raises(AutoRLError, match="needs the server's URL"):
        art.RemoteBackend(api_key=TOKEN)
    with pytest.raises(AutoRLError, match="needs the server's token: pass api_key=TOKEN or set AUTORL_TOKEN"):
        art.RemoteBackend("http://127.0.0.1:7999")
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    backend = art.ServerlessBackend(base_url="http://gpu-box:7999/v1")  # ART's keywords
    assert isinstance(backend, art.Backend) and backend.url == "http://gpu-box:7999"
    assert TOKEN not in repr(backend)


def test_large_bodies_travel_gzipped_and_one_inflating_past_the_limit_is_refused(served, tiny_model, tokenizer):
    backend = RemoteBackend(served.url, api_key=TOKEN)
    model = trainable(tiny_model)
    many = groups(tokenizer, prompts=40)  # over GZIP_OVER_BYTES as JSON
    json_bytes = len(TrainRequest(groups=many, config=LR, step_id="x" * 32).model_dump_json())
    assert json_bytes > GZIP_OVER_BYTES

    async def train():
        await model.register(backend)
        before = backend.bytes_sent
        metrics = await model.train(many, config=LR)
        return metrics, backend.bytes_sent - before

    metrics, sent = asyncio.run(train())
    assert metrics["groups"] == 40 and sent < json_bytes / 3
    bomb = gzip.compress(b" " * (MAX_BODY + 1))  # small on the wire
    assert len(bomb) < MAX_BODY
    response = call("POST", f"{served.url}/models", content=bomb, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 413 and "inflates past" in response.json()["error"]
    response = call("POST", f"{served.url}/models", content=b"not gzip", headers={"Content-Encoding": "gzip"})
    assert response.status_code == 400 and "gzip" in response.json()["error"]
