"""Integration: the embedded model behind a real vLLM server, one GRPO step, the new LoRA served (merged into
the weights in place, and back to the base weights), a server that lets no request in without its key but
its health check, and a restarted backend that resumes at the newest checkpoint. Its first server runs the CPU
default, torch.compile included; the restarted one starts eager, as the other slow tests' servers do
(tests/conftest.py)."""

import asyncio
import tempfile
from pathlib import Path

import httpx
import pytest

import autorl as art
from tests.helpers.limits import scaled

pytestmark = pytest.mark.slow
GUARDED = [
    ("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
    ("POST", "/v1/load_lora_adapter"), ("GET", "/metrics"), ("GET", "/server_info"), ("GET", "/version"),
    ("POST", "/tokenize"), ("POST", "/invocations"), ("GET", "/openapi.json"), ("GET", "/docs"),
    ("POST", "/pause"), ("POST", "/resume"), ("POST", "/collective_rpc"), ("POST", "/reset_prefix_cache"),
    ("GET", "/is_paused"),
]  # fmt: skip
"""What vLLM answers, its development endpoints (on in merged serving) included: vLLM's own --api-key guards
only /v1 (measured: with VLLM_API_KEY set, /invocations, /server_info, /metrics and /pause answered without it)."""


def merged_dirs() -> set[Path]:
    """Where merged serving may write merged weights: /dev/shm, or the temporary directory."""
    return {p for d in ("/dev/shm", tempfile.gettempdir()) for p in Path(d).glob("autorl-merged-*")}


def server_config(serving: str, compiled: bool) -> art.ServerConfig:
    """The CPU default with torch.compile (`compiled`; the suite's other servers start eager, tests/conftest.py:
    a compiled start spends about a minute warming up) or eager."""
    return art.ServerConfig(lora_serving=serving, startup_timeout_s=scaled(240), enforce_eager=not compiled)


# How each serving mode names what it serves: (before training, after step 1).
NAMES = {"adapter": ("embedded:smollm2-135m", "agent@0001"), "merged": ("agent", "agent")}


@pytest.mark.timeout(600)  # ~110-330 s on CI: a compiled server start, a step, a restarted backend
# merged: the CPU default; adapter serving (CUDA's) trains, serves and deletes checkpoints in test_art_programs.py
@pytest.mark.parametrize("serving", ["merged"])
def test_art_style_rollouts_train_step_and_lora_reload(tmp_path, serving):
    async def scenario():
        backend = art.LocalBackend(tmp_path, server=server_config(serving, compiled=True))
        model = art.TrainableModel(name="agent", project="it")
        left = merged_dirs()
        await model.register(backend)
        try:
            server = backend.serving(model).server
            root = server.base_url.removesuffix("/v1")
            async with httpx.AsyncClient(timeout=60) as http:
                for method, path in GUARDED:  # no key, a wrong key: refused before vLLM sees the request
                    for headers in ({}, {"Authorization": "Bearer autorl-local"}):
                        answer = await http.request(method, root + path, headers=headers, json={})
                        assert answer.status_code == 401, (method, path, headers)
                assert (await http.get(root + "/health")).status_code == 200
                assert (await http.get(root + "/metrics", headers=server.headers)).status_code == 200
            client = model.openai_client()
            assert model.get_inference_name() == NAMES[serving][0]
            assert await model.get_step() == 0

            async def greedy_logprobs(name: str | None = None) -> list[float]:
                reply = await client.chat.completions.create(
                    model=name or model.get_inference_name(),
                    messages=[{"role": "user", "content": "Name a colour."}],
                    max_tokens=4,
                    temperature=0,
                    logprobs=True,
                )
                return [t.logprob for t in reply.choices[0].logprobs.content]

            before = await greedy_logprobs()

            async def rollout(i: int) -> art.Trajectory:
                messages = [{"role": "user", "content": f"Count from 1 to {i + 3}."}]
                response = await client.chat.completions.create(
                    model=model.get_inference_name(), messages=messages, max_tokens=24, logprobs=True, temperature=1.0
                )
                choice = response.choices[0]
                assert choice.logprobs.content[0].token.startswith("token_id:")
                return art.Trajectory(
                    messages_and_choices=[*messages, choice], reward=len(choice.message.content or "")
                )

            groups = await art.gather_trajectory_groups(
                [art.TrajectoryGroup(rollout(i) for i in range(4))], pbar_desc=None
            )
            assert len(groups[0]) == 4

            # a request sent while the step trains waits for it, then reaches the new LoRA
            order = []
            # a large learning rate, so that the step visibly moves the served weights
            training = asyncio.create_task(model.train(groups, config=art.TrainConfig(learning_rate=1e-2)))
            training.add_done_callback(lambda _: order.append("train"))
            await asyncio.sleep(0)  # the step has started and holds the gate
            waiting = asyncio.ensure_future(client.models.list())  # an awaitable paginator
            waiting.add_done_callback(lambda _: order.append("request"))
            metrics = await training
            served = {m.id for m in (await waiting).data}
            assert order == ["train", "request"]

            assert metrics["step"] == 1 and metrics["trained_tokens"] > 0
            assert await model.get_step() == 1
            assert model.get_inference_name() == NAMES[serving][1]
            assert NAMES[serving][1] in served
            trained = await greedy_logprobs()
            assert trained != before  # the server answers with the trained LoRA
            # merged into the weights inside the server's worker (the default), not written to a file: the file
            # path serves the same weights
            assert server.reloads_in_memory()
            server.config = server.config.model_copy(update={"merged_reload": "files"})
            for step in (0, 1):  # the resident checkpoint is not reloaded: go through the base
                await backend.serve_checkpoint(model, step)
            assert await greedy_logprobs() == pytest.approx(trained, abs=1e-5)
            server.config = server.config.model_copy(update={"merged_reload": "memory"})
            reply = await client.chat.completions.create(
                model=model.get_inference_name(), messages=[{"role": "user", "content": "Hi"}], max_tokens=8
            )
            assert reply.choices[0].message.content is not None
            run_dir = tmp_path / "it" / "models" / "agent"  # ART's layout
            assert (run_dir / "checkpoints" / "0001" / "adapter_model.safetensors").is_file()
            assert len((run_dir / "history.jsonl").read_text().splitlines()) == 1
            assert merged_dirs() == left  # the server holds its own copy of the merged weights; no file stays
            # the base weights served again (merged: reloaded in place, the prefix cache of the LoRA's dropped)
            base = await backend.serve_checkpoint(model, 0)
            assert base == NAMES[serving][0] and await greedy_logprobs(base) == pytest.approx(before, abs=1e-3)
            await backend.serve_checkpoint(model, 1)
            return model.inference_base_url
        finally:
            backend.close()

    async def restarted():
        """A new backend on the same directory resumes at the newest checkpoint and serves it (eager: the first
        start tried the compiled default)."""
        again = art.TrainableModel(name="agent", project="it")
        backend = art.LocalBackend(tmp_path, server=server_config(serving, compiled=False))
        await again.register(backend)
        try:
            assert await again.get_step() == 1
            assert again.get_inference_name() == NAMES[serving][1]
            if serving == "merged":
                assert backend.serving(again).resident == 1
            served = {m.id for m in (await again.openai_client().models.list()).data}
            assert NAMES[serving][1] in served
            log = (backend.run_dir(again) / "logs" / "vllm.log").read_text()
            assert log.count("Warming up model for the compilation") == 1  # the compiled start's, not the eager one's
        finally:
            backend.close()

    base_url = asyncio.run(scenario())
    with pytest.raises(httpx.HTTPError):
        httpx.get(base_url.removesuffix("/v1") + "/health", timeout=2)
    asyncio.run(restarted())
