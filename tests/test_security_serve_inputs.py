"""`autorl serve` as a hostile client tries it, over real HTTP (security round 3's closing review): a body nested past
the parser's depth on `/v1`, a checkpoint step outside 0..MAX_STEP, metric names that forge lines of the server's
log, a vLLM flag's value that is not one of its values; each a 4xx line, none a 500, nothing started or written."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from autorl.serving.config import ServerConfig
from tests.helpers.chat_server import ChatCompletionServer, completion
from tests.helpers.remote import Harness, call, register_body

HOSTILE = {
    "/v1 nested 100000 deep": ("POST", "/v1/chat/completions", b'{"model": "agent", "messages": ' + b"[" * 100_000),
    "a checkpoint step of 400 digits": ("GET", "/models/agent/checkpoints/" + "9" * 400, b""),
    "a negative checkpoint step": ("GET", "/models/agent/checkpoints/-1", b""),
    "a best metric with a newline": (
        "POST",
        "/models/agent/delete_checkpoints",
        json.dumps({"best_checkpoint_metric": "val/reward\nERROR forged line"}).encode(),
    ),
    "a keep policy of 100000 characters": (
        "POST",
        "/models/agent/delete_checkpoints",
        json.dumps({"keep": "latest," * 20_000}).encode(),
    ),
    "a logged metric named with a NUL": (
        "POST",
        "/models/agent/log",
        json.dumps({"metrics": {"a\x00b": 1.0}}).encode(),
    ),
}
"""Requests past a bound of the server's, each refused with one line."""


@pytest.fixture(scope="module")
def serving(tmp_path_factory, tiny_model):
    chat = ChatCompletionServer(lambda body: completion(body, "hello"))
    harness = Harness(tmp_path_factory.mktemp("serve-inputs"), chat)
    assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    yield harness
    harness.stop()
    chat.close()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_security_a_hostile_request_to_serve_is_one_4xx_line(serving, case):
    method, path, body = HOSTILE[case]
    answer = call(method, f"{serving.url}{path}", content=body)
    assert 400 <= answer.status_code < 500 and "\n" not in answer.json()["error"], (answer.status_code, answer.text)


@pytest.mark.parametrize(
    "server", [{"dtype": "--trust-remote-code"}, {"dtype": "x" * 1000}, {"tool_call_parser": "hermes --x"}]
)
def test_security_a_vllm_flag_a_client_sets_takes_that_flags_values_only(serving, tiny_model, server):
    body = register_body(tiny_model, name="flags", server=server)
    answer = call("POST", f"{serving.url}/models", content=json.dumps(body))
    assert answer.status_code == 400 and "server" in answer.json()["error"], answer.text
    with pytest.raises(ValidationError):
        ServerConfig(**server)
    assert ServerConfig(dtype="bfloat16", tool_call_parser="llama3_json").dtype == "bfloat16"
