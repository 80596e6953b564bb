"""A real run's trace read back from Arize Phoenix (a local OTLP backend with a UI): `autorl run --otlp-endpoint`
on the embedded model with a RULER judge served by a scripted stand-in over HTTP; the spans of the run, its
stages, the training step, its rollouts (chat turns, each turn's OpenAI client call as OpenInference's LLM span:
the instrumentation that traces a user's ART-style rollout code, here on autorl's own rollouts, since `autorl run`
runs no user rollout code), the judge's request and the update, each under its parent, with their attributes; the
saved trajectories name their judge span; no span holds the API key.

Phoenix runs in a virtual environment of its own (tests/helpers/phoenix.py says which, and how it is made); the
test skips, saying why, only where the package index cannot be reached.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import phoenix
from tests.helpers.chat_server import ChatCompletionServer
from tests.helpers.judge_server import by_content
from tests.helpers.limits import scaled

pytestmark = pytest.mark.slow
SECRET = "sk-phoenix-0123456789-never-in-a-span"
TASK = """
description = "Answer the user's question in one short sentence."
system_prompt = "Answer in one short sentence."
inputs_file = "inputs.jsonl"
"""
INPUTS = ["What colour is the sky?", "Name a fruit.", "What is 2 + 2?", "Name a planet.", "Say hello.", "Name a tree."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def phoenix_python() -> str:
    """The interpreter Phoenix runs with (tests/helpers/phoenix.py)."""
    python, why = phoenix.python()
    if python is None:
        pytest.skip(f"Arize Phoenix could not be installed: {why}")
    return python


def start_phoenix(python: str, work: Path) -> tuple[subprocess.Popen, str]:
    """Phoenix serving on free loopback ports with its database under `work`; its URL once it answers."""
    port = free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(free_port())}  # fmt: skip
    log = (work / "phoenix.log").open("w")
    process = subprocess.Popen([python, "-m", "phoenix.server.main", "serve"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            get(f"{url}/v1/projects")
            return process, url
        except OSError:
            assert process.poll() is None, (work / "phoenix.log").read_text()[-2000:]
            time.sleep(2)
    process.kill()
    raise AssertionError("Phoenix did not answer within 240 s")


def spans_of(url: str, project: str) -> list[dict]:
    spans, cursor = [], None
    while True:
        page = get(f"{url}/v1/projects/{project}/spans?limit=1000" + (f"&cursor={cursor}" if cursor else ""))
        spans += page["data"]
        if not (cursor := page.get("next_cursor")):
            return spans


@pytest.mark.timeout(2100)  # Phoenix's install (~2 min, once) and start (~60 s on 2 busy cores), a vLLM start, ...
def test_a_run_s_trace_in_phoenix_has_every_stage_step_rollout_judgement_and_update(tmp_path, phoenix_python):
    (tmp_path / "task.toml").write_text(TASK)
    rows = [{"input": text, "split": "val" if n >= 4 else "train"} for n, text in enumerate(INPUTS)]
    (tmp_path / "inputs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "phoenix").mkdir()
    phoenix, url = start_phoenix(phoenix_python, tmp_path / "phoenix")
    judge = ChatCompletionServer(by_content)
    try:
        command = [sys.executable, "-m", "pipelines.cli", "run", str(tmp_path / "task.toml"), "--home",
                   str(tmp_path / "home"), "--name", "traced", "--steps", "1", "--group-size", "2",
                   "--groups-per-step", "1", "--max-tokens", "16", "--eval-samples", "2", "--preflight", "off",
                   "--judge", f"scripted@{judge.base_url}", "--no-wandb", "--otlp-endpoint", f"{url}/v1/traces"]  # fmt: skip
        env = {**os.environ, "OPENAI_API_KEY": SECRET}
        done = subprocess.run(command, capture_output=True, text=True, timeout=scaled(900), env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        deadline = time.monotonic() + 60  # the last batch reaches Phoenix's database shortly after the run ends
        spans = spans_of(url, "autorl")
        while not [s for s in spans if s["name"] == "autorl.run"]:
            assert time.monotonic() < deadline, [s["name"] for s in spans]
            time.sleep(2)
            spans = spans_of(url, "autorl")
    finally:
        judge.close()
        phoenix.terminate()
        phoenix.wait(timeout=scaled(60))

    by_id = {s["context"]["span_id"]: s for s in spans}
    (run,) = [s for s in spans if s["name"] == "autorl.run"]

    def parent(span: dict) -> dict:
        return by_id[span["parent_id"]]

    def named(name: str) -> list[dict]:
        return [s for s in spans if s["name"] == name]

    assert run["parent_id"] is None and {s["context"]["trace_id"] for s in spans} == {run["context"]["trace_id"]}
    stages = {s["attributes"]["autorl.stage"]: s for s in spans if s["name"].startswith("autorl.stage ")}
    assert set(stages) == {"inputs", "system_prompt", "baseline", "preflight", "plan", "train", "evaluate", "report"}
    assert all(parent(s) is run for s in stages.values())
    (step,) = named("autorl.step")
    assert parent(step) is stages["train"] and step["attributes"]["autorl.step"] == 1
    rollouts = [s for s in named("autorl.rollout") if parent(s) is step]
    assert len(rollouts) == 2  # group_size answers to the step's one input
    turns = [s for s in named("chat") if parent(s)["name"] == "autorl.rollout"]
    assert turns and all(s["attributes"]["gen_ai.usage.output_tokens"] > 0 for s in turns)
    # each turn's OpenAI client call, traced by OpenInference as a user's rollout code's calls are: an LLM span
    # under the turn, with the turn's tokens
    calls = [s for s in named("ChatCompletion") if parent(s)["name"] == "chat"]
    assert sorted(s["parent_id"] for s in calls) == sorted(t["context"]["span_id"] for t in turns)
    assert all(s["span_kind"] == "LLM" for s in calls)
    assert all(
        s["attributes"]["llm.token_count.completion"] == parent(s)["attributes"]["gen_ai.usage.output_tokens"]
        for s in calls
    )
    judged = [s for s in named("autorl.judge") if parent(s) is step]
    assert len(judged) == 1 and len(judged[0]["attributes"]["autorl.judge.scores"]) == 2
    (request,) = [s for s in named("chat scripted") if parent(s) is judged[0]]
    assert request["attributes"]["gen_ai.usage.input_tokens"] == 100
    assert request["attributes"]["ruler.outcome"] == "ok" and request["attributes"]["ruler.prompt.chars"] > 0
    (update,) = named("autorl.update")
    assert parent(update) is step and update["attributes"]["autorl.update.step_time_s"] > 0
    assert {"autorl.update.loss", "autorl.update.trained_tokens", "autorl.update.grad_norm"} <= set(
        update["attributes"]
    )
    assert SECRET not in json.dumps(spans)
    # the step's saved groups: each answer names its rollout span and the judge span that scored it
    record = json.loads((tmp_path / "home" / "runs" / "traced" / "run.json").read_text())
    saved = tmp_path / "home" / "artifacts" / "train" / record["keys"]["train"] / "steps" / "0001" / "group_00.json"
    metadata = [t["metadata"] for t in json.loads(saved.read_text())["trajectories"]]
    assert {m["judge_span_id"] for m in metadata} == {judged[0]["context"]["span_id"]}
    assert {m["span_id"] for m in metadata} == {s["context"]["span_id"] for s in rollouts}
    # what Phoenix's columns show: the run's task and totals, each rollout's input and answer, its reward on a span
    # under it, the policy by name (not its cache key), the base model's scoring calls as one named span
    assert run["attributes"]["input.value"] == "Answer the user's question in one short sentence."
    assert run["attributes"]["autorl.tokens.total"] > 0
    assert run["attributes"]["output.value"].startswith("held-out reward: base ")
    assert all(s["attributes"]["input.value"] in INPUTS for s in named("autorl.rollout"))
    rewards = [s for s in named("autorl.reward") if s["parent_id"] in {r["context"]["span_id"] for r in rollouts}]
    assert len(rewards) == 2 and all(isinstance(s["attributes"]["autorl.reward"], int | float) for s in rewards)
    assert all(record["keys"]["train"] not in s["attributes"]["llm.model_name"] for s in calls)
    (scoring,) = named("autorl.base_logprobs")
    assert parent(scoring) is stages["evaluate"] and not named("Completion")
