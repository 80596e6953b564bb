"""`autorl serve` as a hostile client tries it, over real HTTP (security round 3's closing review): a body nested past
the parser's depth on `/v1`, a checkpoint step outside 0..MAX_STEP, metric names that forge lines of the server's
log, a vLLM flag's value that is not one of its values, answer tokens or choices past the server's limits on `/v1`;
each a 4xx line, none a 500, nothing started, written or sent on."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from autorl.backends.remote.limits import ServeLimits
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


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_security_what_a_v1_request_asks_is_bounded_as_a_rollouts_is(serving, route):
    """The plain `/v1` routes bound answer tokens and choices as the capture gateway's rollout routes do (one
    check, `ServeLimits.check_ask`): past a bound a 400 line naming the option, and nothing reaches the model."""
    limits = ServeLimits()
    ask = {"model": "agent", "messages": [{"role": "user", "content": "hi"}], "prompt": "hi"}
    tokens = "(autorl serve --max-client-model-len)"
    sent = len(serving.chat.paths)
    for field, value, says in [
        ("max_tokens", limits.max_client_model_len + 1, f"max_tokens=8193 is over the limit of 8192 {tokens}"),
        ("max_completion_tokens", 10**400, tokens),
        ("max_tokens", float("inf"), tokens),
        ("n", limits.max_num_seqs + 1, "n=257 is over the limit of 256 (autorl serve --max-num-seqs)"),
        ("n", 0, "n must be a positive number, not '0'"),
        ("n", float("nan"), "n must be a positive number, not 'nan'"),
        ("max_tokens", "9" * 100, "max_tokens must be a positive number, not '99999"),
    ]:
        answer = call("POST", f"{serving.url}{route}", content=json.dumps({**ask, field: value}))
        line = answer.json()["error"]
        assert answer.status_code == 400 and says in line and "\n" not in line, (field, value, answer.text)
    assert len(serving.chat.paths) == sent  # nothing past a bound was sent on
    inside = {**ask, "max_tokens": limits.max_client_model_len, "n": 2}
    assert call("POST", f"{serving.url}{route}", content=json.dumps(inside)).status_code == 200
    assert serving.chat.paths[sent:] == [route] and serving.chat.requests[-1]["max_tokens"] == 8192
