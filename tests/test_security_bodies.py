"""Security findings about request bodies of `autorl serve`: a small body that would become gigabytes once
parsed is refused as it is parsed, on a thread (the app runs for real under uvicorn on 127.0.0.1)."""

from __future__ import annotations

import gzip
import json
import threading
import tracemalloc

import pytest

from autorl.backends.remote.limits import ServeLimits
from tests.helpers.remote import Harness, call, register_body

MESSAGE = {"role": "user", "content": "hi"}


@pytest.fixture
def harness(tmp_path, chat):
    made: list[Harness] = []

    def start(limits: ServeLimits | None = None) -> Harness:
        made.append(Harness(tmp_path, chat, limits=limits))
        return made[-1]

    yield start
    for one in made:
        one.stop()


def train(harness: Harness, body: bytes, gzipped: bool = True):
    headers = {"Content-Encoding": "gzip"} if gzipped else {}
    content = gzip.compress(body, compresslevel=9) if gzipped else body
    return call("POST", f"{harness.url}/models/agent/train", content=content, headers=headers)


def test_security_a_hundred_thousand_empty_groups_are_refused_as_they_are_parsed(harness, tiny_model):
    served = harness()
    assert call("POST", f"{served.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    body = (
        b'{"step_id":"abcdefgh","groups":[' + b",".join([b'{"trajectories":[]}'] * 100_000) + b"]}"
    )  # 2 MB, the harness's body limit
    tracemalloc.start()
    try:
        answer = train(served, body)  # about 5 KB sent
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        "more than 1024 groups in one request, this server's limit (autorl serve --max-groups-per-step)"
    )
    assert peak < 32 * 2**20, peak  # the inflated body and its copy, not 100k groups
    assert call("GET", f"{served.url}/health").status_code == 200


def test_security_objects_and_trajectories_are_bounded_whatever_holds_them(harness, tiny_model):
    served = harness(ServeLimits(max_body_objects=1000, max_trajectories_per_step=10))
    assert call("POST", f"{served.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    bodies = {
        "empty groups without a key": {"step_id": "abcdefgh", "groups": [{}] * 2000},
        "messages in one trajectory": {
            "step_id": "abcdefgh",
            "groups": [{"trajectories": [{"messages_and_choices": [MESSAGE] * 2000, "reward": 0}]}],
        },
        "metadata": {"step_id": "abcdefgh", "groups": [{"trajectories": [], "metadata": {"x": [{}] * 2000}}]},
    }
    for what, body in bodies.items():
        answer = train(served, json.dumps(body).encode(), gzipped=what != "metadata")
        assert answer.status_code == 400, what
        assert answer.json()["error"].startswith("more than 1000 objects in one request"), what
    sft = {"step_id": "abcdefgh", "groups": [], "trajectories": [{"messages_and_choices": [MESSAGE]}] * 11}
    answer = train(served, json.dumps(sft).encode())
    assert answer.json()["error"] == (
        "more than 10 trajectories in one request, this server's limit (autorl serve --max-trajectories-per-step)"
    )
    spread = {"step_id": "abcdefgh", "groups": [{"trajectories": [{"messages_and_choices": [MESSAGE]}] * 4}] * 3}
    assert "more than 10 trajectories" in train(served, json.dumps(spread).encode()).json()["error"]
    log = {"groups": [{"trajectories": [{"messages_and_choices": [MESSAGE]}] * 11}]}
    answer = call("POST", f"{served.url}/models/agent/log", content=json.dumps(log))
    assert answer.status_code == 400 and "--max-trajectories-per-step" in answer.json()["error"]


class Recording(ServeLimits):
    """ServeLimits that record the thread each body is checked on."""

    def check_body(self, raw: bytes) -> str | None:
        Recording.threads.append(threading.current_thread())
        return super().check_body(raw)


Recording.threads = []


def test_security_bodies_are_parsed_off_the_event_loop(harness, tiny_model):
    served = harness(Recording())
    assert call("POST", f"{served.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
    assert Recording.threads and all(thread is not served.thread for thread in Recording.threads)
