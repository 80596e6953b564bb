"""Adapter serving (`lora_serving="adapter"`) keeps every checkpoint it served under its name until the checkpoint
is deleted: a rollout that named the model before a training step and sends its request while the step runs, or
its next turn after it, is answered by the checkpoint it named, never a 404; a deleted checkpoint's name is
unloaded first; two callers serving the same new checkpoint load it once. The vLLM server is a stand-in at the
HTTP edge that keeps vLLM's LoRA registry rules (a name loaded twice is refused, an unknown one is 404); the
trainer is the real one, on the tiny model."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from autorl import TrainableModel, TrainerConfig, Trajectory, TrajectoryGroup
from autorl.backends.local import LocalBackend
from autorl.serving.config import ServerConfig
from autorl.serving.vllm_server import VLLMServer
from tests.helpers.chat_server import send_json
from tests.helpers.tiny import choice


class StandInVLLM:
    """vLLM's LoRA routes and chat completions over HTTP: `load_lora_adapter` refuses a name already loaded
    (400), `unload_lora_adapter` an unknown one (404), and a chat completion naming neither the base model nor a
    loaded LoRA is 404, as vLLM answers them. `events` records the loads, unloads and completions in order."""

    def __init__(self, base: str):
        self.base = base
        self.loras: set[str] = set()
        self.events: list[str] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                send_json(self, 200, {})  # /health

            def do_POST(self) -> None:
                import json

                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                send_json(self, *stand_in.answer(self.path, body))

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/v1/load_lora_adapter":
            if body["lora_name"] in self.loras:
                return 400, {"error": {"message": f"The lora adapter '{body['lora_name']}' has already been loaded."}}
            self.loras.add(body["lora_name"])
            self.events.append(f"load {body['lora_name']}")
            return 200, {}
        if path == "/v1/unload_lora_adapter":
            if body["lora_name"] not in self.loras:
                return 404, {"error": {"message": f"The lora adapter '{body['lora_name']}' cannot be found."}}
            self.loras.remove(body["lora_name"])
            self.events.append(f"unload {body['lora_name']}")
            return 200, {}
        if body["model"] not in (self.loras | {self.base}):
            self.events.append(f"404 {body['model']}")
            return 404, {"error": {"message": f"The model `{body['model']}` does not exist.", "code": 404}}
        self.events.append(f"answer {body['model']}")
        message = {"role": "assistant", "content": "yes"}
        completion = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"]}
        return 200, {**completion, "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stand_in(tiny_model, monkeypatch):
    """A `StandInVLLM` that every `VLLMServer.start` of the test reaches (the process is the edge stood in for)."""
    vllm = StandInVLLM(str(tiny_model))
    started: list[subprocess.Popen] = []

    def start(server: VLLMServer) -> None:
        server.port = vllm.port
        server._process = subprocess.Popen(["sleep", "300"])  # only `running` asks it
        started.append(server._process)

    monkeypatch.setattr(VLLMServer, "start", start)
    yield vllm
    vllm.close()
    for process in started:
        process.kill()
        process.wait()


def scored_groups(tokenizer) -> list[TrajectoryGroup]:
    prompt = [{"role": "user", "content": "Reply politely, yes or no?"}]
    return [
        TrajectoryGroup(
            Trajectory(messages_and_choices=[*prompt, choice(text, tokenizer.encode(text))], reward=reward)
            for text, reward in (("yes please", 1.0), ("no", 0.0))
        )
    ]


def test_a_rollout_that_named_the_checkpoint_before_a_step_is_answered_during_and_after_it(
    tiny_model, tokenizer, tmp_path, stand_in
):
    model = TrainableModel(
        name="policy", project="p", base_model=str(tiny_model), trainer=TrainerConfig(seed=0, dtype="float32")
    )
    backend = LocalBackend(tmp_path, server=ServerConfig(lora_serving="adapter"))

    async def scenario() -> None:
        await model.register(backend)
        client = model.openai_client()
        await backend.train(model, scored_groups(tokenizer), learning_rate=1e-5)
        named = model.get_inference_name()  # a rollout takes the name, then the next step starts
        assert named == "policy@0001"
        step = asyncio.create_task(backend.train(model, scored_groups(tokenizer), learning_rate=1e-5))
        while backend.slot(model).gate._open.is_set():  # the step has closed the gate: requests wait
            await asyncio.sleep(0.01)
        turn = {"model": named, "messages": [{"role": "user", "content": "hi"}]}
        during = asyncio.create_task(client.chat.completions.create(**turn))
        assert (await step).step == 2 and model.get_inference_name() == "policy@0002"
        assert (await during).model == named  # sent once the step ended: the checkpoint it named answers
        assert (await client.chat.completions.create(**turn)).model == named  # and the rollout's next turn

        # two callers serving a checkpoint that is not loaded: one load, both get its name once it is loaded
        await backend.serving(model).retire(1)
        names = await asyncio.gather(*(backend.serve_checkpoint(model, 1) for _ in range(2)))
        assert names == ["policy@0001"] * 2
        await backend.serve_checkpoint(model, 2)  # the newest again

        # a checkpoint deleted is unloaded first: its name is then a clean 404, the newest still answers
        assert await model.delete_checkpoints(keep="latest") == [1]
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(**turn)
        assert (await client.chat.completions.create(**{**turn, "model": "policy@0002"})).model == "policy@0002"
        assert backend.serving(model).served_steps() == {2}

    try:
        asyncio.run(scenario())
    finally:
        backend.close()
    assert stand_in.events == [
        "load policy@0001",
        "load policy@0002",
        "answer policy@0001",
        "answer policy@0001",
        "unload policy@0001",
        "load policy@0001",
        "unload policy@0001",
        "404 policy@0001",
        "answer policy@0002",
    ]
