"""`autorl serve`'s HTTP surface fuzzed from its OpenAPI description (`autorl.backends.remote.openapi.describe`) with
schemathesis, the capture gateway's rollout routes included: the real app, in-process, over a stand-in placement
whose models are served by a plain HTTP server in place of vLLM (tests/test_remote_backend.py's `ScriptedPlacement`), with the token. Whatever
schemathesis sends (valid requests and invalid ones, any path parameter, any body): no 5xx, no answer over
`MAX_ANSWER_BYTES`, and nothing but the inference allowlist ever reaches the model's server."""

from __future__ import annotations

import json

import pytest
import schemathesis
import schemathesis.specs.openapi.schemas  # (see below)
from hypothesis import HealthCheck, settings
from starlette.testclient import TestClient

import autorl as art
from autorl.atomic import private_dir
from autorl.backends.remote.app import make_app
from autorl.backends.remote.config import MODELS_DIR
from autorl.backends.remote.limits import ServeLimits
from autorl.backends.remote.openapi import describe
from autorl.backends.remote.served import ServedModels
from autorl.serving.auth import bearer
from autorl.serving.config import ServerConfig
from autorl.serving.routes import INFERENCE_ROUTES
from tests.helpers.chat_server import ChatCompletionServer, completion
from tests.helpers.remote import MAX_BODY, TOKEN, ScriptedPlacement, register_body, with_test_models

# The module `schemathesis.openapi.from_dict` imports on first use is imported here, at collection: imported in
# the fixture after other modules' tests (random order), CPython 3.11's parser failed on it with "AST constructor
# recursion depth mismatch" (pytest rewrites the asserts of plugin packages such as schemathesis as they import).

CAPTURE_ROUTES = [
    "/models/{name}/rollouts",
    "/models/{name}/rollouts/{rollout}/v1/chat/completions",
    "/models/{name}/rollouts/{rollout}/reward",
    "/models/{name}/rollouts/{rollout}/finish",
]
"""The capture gateway's routes on `autorl serve` (autorl/backends/remote/rollouts.py)."""
MAX_ANSWER_BYTES = 64 * 1024
"""No answer of the fuzzed app is larger (its error lines are short, the lists it answers are of one model)."""


@pytest.fixture(scope="module")
def surface(tmp_path_factory, tiny_model):
    """The app with one model registered ("agent"), its stand-in vLLM, and its schema for schemathesis."""
    home = tmp_path_factory.mktemp("fuzz")
    chat = ChatCompletionServer(lambda body: completion(body, "hello"))
    config = ServerConfig(lora_serving="adapter")
    backend = art.LocalBackend(home / MODELS_DIR, server=config)
    backend.placement = ScriptedPlacement(chat, config)
    served = ServedModels(backend, private_dir(home / "serve"), 60, with_test_models(ServeLimits(max_models=2), home))
    app = make_app(served, TOKEN, MAX_BODY)
    described = describe(app)
    assert set(CAPTURE_ROUTES) <= set(described["paths"])  # the capture gateway's routes are fuzzed too
    schema = schemathesis.openapi.from_dict(described)
    schema.app = app
    registered = TestClient(app).post("/models", content=json.dumps(register_body(tiny_model)), headers=bearer(TOKEN))
    assert registered.status_code == 200, registered.text
    yield schema
    chat.close()
    assert set(chat.paths) <= set(INFERENCE_ROUTES), chat.paths  # what reached the stand-in vLLM


fuzzed = schemathesis.pytest.from_fixture("surface")


@fuzzed.parametrize()
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_gets_a_5xx_an_oversized_answer_or_past_the_allowlist(case):
    response = case.call(headers={**bearer(TOKEN), "X-AutoRL-Client": "the-fuzzing-client"})
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:300])
    assert len(response.content) <= MAX_ANSWER_BYTES
