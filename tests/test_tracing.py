"""Traces (autorl/tracing.py) read back from OpenTelemetry's in-memory exporter (the `spans` fixture): a step's
rollout with its chat turns and tool call, and a RULER judge's request over real HTTP to a scripted judge, each
under its parent with the GenAI attributes; no attribute holds the judge's key; a user's OpenAI client call is
OpenInference's LLM span under the autorl span around it, with the secrets of its request and of its error
redacted; off, nothing is traced and nothing is imported. Over OTLP/HTTP to a real receiver: the spans as a run
sends them, turned on by `--otlp-endpoint` or by `OTEL_EXPORTER_OTLP_ENDPOINT` alone (the training loops' step and
update spans: tests/test_pipeline_trainer.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import openai
import pytest
from rich.console import Console

import ruler
from autorl import TrajectoryGroup, tracing
from autorl.agents.rollout import agent_rollout
from autorl.task import TaskSpec
from pipelines.config import RunConfig
from pipelines.policy import Policy
from pipelines.stage_context import StageContext, judge_attributes
from pipelines.staged_run import run_totals
from tests.helpers.agents import call, scripted, with_toolbox
from tests.helpers.chat_server import ChatCompletionServer, completion, read_request, send_json
from tests.helpers.judge_server import by_content
from tests.helpers.remote import TOKEN

SECRET = "sk-tracing-0123456789-never-in-a-span"


@pytest.fixture
def otlp_receiver():
    """A real OTLP/HTTP receiver on 127.0.0.1 that decodes the protobuf requests as any OTLP backend does: its base
    URL, and the (path, `ExportTraceServiceRequest`) of each request it got. Tracing is off after the test."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, request))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", received
    tracing.shutdown()
    server.shutdown()


def received_spans(received: list) -> list:
    """The spans of every request an `otlp_receiver` got."""
    return [s for _, r in received for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


def test_a_step_s_rollout_turns_tool_call_and_judge_request_are_spans_under_it(spans, tmp_path):
    complete, _ = scripted({"tool_calls": [call("convert", json.dumps({"value": 2, "from_unit": "km", "to_unit": "m"}))]},
                           {"content": "2 km is 2000 m."})  # fmt: skip
    server = ChatCompletionServer(by_content)
    judge = ruler.RulerJudge(
        ruler.JudgeModel(model="scripted", base_url=server.base_url, api_key=SECRET), cache_dir=tmp_path / "cache"
    )

    async def step():
        with tracing.span("autorl.step", {"autorl.step": 1}):
            with tracing.span("autorl.rollout", {"gen_ai.request.model": "policy"}):
                first = await with_toolbox(
                    lambda box: agent_rollout(complete, "sys", "2 km in m?", toolbox=box, max_turns=2)
                )
            second = first.model_copy(deep=True)
            second.messages_and_choices[-1] = {
                "role": "assistant",
                "content": "It is 2000 metres, since 1 km = 1000 m.",
            }
            with tracing.span("autorl.judge") as span:
                scored = await ruler.ruler_score_group(TrajectoryGroup([first, second]), judge, ruler.DEFAULT_RUBRIC)
                tracing.set_attributes(span, judge_attributes(scored))
            return scored

    try:
        scored = asyncio.run(step())
    finally:
        server.close()
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert {"autorl.step", "autorl.rollout", "chat", "execute_tool convert", "autorl.judge", "chat scripted"} <= set(
        finished
    )
    parent = {name: s.parent.span_id if s.parent else None for name, s in finished.items()}
    ids = {name: s.context.span_id for name, s in finished.items()}
    assert parent["autorl.rollout"] == ids["autorl.step"] and parent["autorl.judge"] == ids["autorl.step"]
    assert parent["execute_tool convert"] == ids["autorl.rollout"] and parent["chat"] == ids["autorl.rollout"]
    assert parent["chat scripted"] == ids["autorl.judge"]
    assert len({s.context.trace_id for s in finished.values()}) == 1
    tool = finished["execute_tool convert"].attributes
    assert tool["gen_ai.operation.name"] == "execute_tool" and tool["autorl.tool.ok"] is True
    request = finished["chat scripted"].attributes
    assert request["gen_ai.request.model"] == "scripted" and request["ruler.outcome"] == "ok"
    assert (request["gen_ai.usage.input_tokens"], request["gen_ai.usage.output_tokens"]) == (100, 20)
    assert request["ruler.prompt.chars"] > 0 and request["ruler.answers"] == 2
    judged = finished["autorl.judge"].attributes
    assert list(judged["autorl.judge.scores"]) == [t.reward for t in scored.trajectories]
    assert judged["autorl.judge.requests"] == 1 and judged["gen_ai.usage.input_tokens"] == 100
    every = json.dumps([dict(s.attributes) for s in finished.values()], default=str)
    assert SECRET not in every


def test_attributes_are_values_opentelemetry_takes_and_tracing_off_is_a_shared_no_op():
    assert tracing.safe({"path": Path("/a/b"), "n": 3, "none": None, "xs": (1.0, 2), "mixed": [1, "a"]}) == {
        "path": "/a/b",
        "n": 3,
        "xs": [1.0, 2],
        "mixed": "[1, 'a']",
    }
    assert not tracing.enabled() and tracing.span("x") is tracing.span("y") and tracing.begin("z").span is None
    # off, the pipeline imports no OpenTelemetry package
    code = "import pipelines.staged_run, sys; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_spans_reach_a_real_otlp_http_receiver_with_their_parents_and_attributes(otlp_receiver):
    """The OTLP/HTTP exporter as a run uses it (`configure(endpoint)`); a string attribute is redacted on its way."""
    url, received = otlp_receiver
    assert tracing.configure(f"{url}/v1/traces")
    with tracing.span("autorl.run", {"autorl.run": "r", "judge": f"m@http://u:{SECRET}@10.0.0.5/v1"}):
        step = tracing.begin("autorl.step", {"autorl.step": 1})
        with tracing.span("autorl.update") as span:
            tracing.set_attributes(span, tracing.update_attributes({"loss": -0.25, "trained_tokens": 96}))
        step.end({"autorl.reward": 0.5})
    tracing.shutdown()  # flushes the batch
    assert {path for path, _ in received} == {"/v1/traces"}
    spans = received_spans(received)
    resource = {a.key: a.value.string_value for a in received[0][1].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "autorl"
    by_name = {s.name: s for s in spans}
    assert set(by_name) == {"autorl.run", "autorl.step", "autorl.update"}
    assert by_name["autorl.update"].parent_span_id == by_name["autorl.step"].span_id
    assert (
        by_name["autorl.step"].parent_span_id == by_name["autorl.run"].span_id
        and not by_name["autorl.run"].parent_span_id
    )

    def attributes(name: str) -> dict:
        values = {}
        for a in by_name[name].attributes:
            kind = a.value.WhichOneof("value")
            values[a.key] = getattr(a.value, kind)
        return values

    assert attributes("autorl.update")["autorl.update.loss"] == -0.25
    assert attributes("autorl.update")["autorl.update.trained_tokens"] == 96
    assert attributes("autorl.step")["autorl.reward"] == 0.5 and attributes("autorl.step")["autorl.step"] == 1
    assert attributes("autorl.run")["judge"] == "m@http://<redacted>@10.0.0.5/v1"
    assert attributes("autorl.run")["openinference.span.kind"] == "CHAIN"


def test_the_otlp_endpoint_variable_alone_turns_tracing_on_and_without_it_tracing_stays_off(otlp_receiver, monkeypatch):
    """What a run does without `--otlp-endpoint` (`configure(None)`): off unless `OTEL_EXPORTER_OTLP_ENDPOINT`
    is set; with it, the spans go to that base URL's `/v1/traces`, as OpenTelemetry's variables say."""
    url, received = otlp_receiver
    for name in tracing.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not tracing.configure(None) and not tracing.enabled() and tracing.span("autorl.run") is tracing.span("x")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    assert tracing.configure(None) and tracing.enabled()
    with tracing.span("autorl.run", {"autorl.run": "r"}):
        pass
    tracing.shutdown()  # flushes the batch
    assert {path for path, _ in received} == {"/v1/traces"}
    assert [s.name for s in received_spans(received)] == ["autorl.run"]


def gateway() -> ChatCompletionServer:
    """A chat-completions server on 127.0.0.1 that answers "hello" (with its usage), and a request whose last message
    is "fail" with a 502 whose JSON error quotes its upstream's URL with credentials, as a gateway's error may."""
    server = ChatCompletionServer(lambda body: {})

    class Handler(server.httpd.RequestHandlerClass):
        def do_POST(self) -> None:
            body = read_request(self, server)
            if body["messages"][-1]["content"] == "fail":
                message = f"upstream http://svc:{SECRET}@gateway.internal/v1 refused the connection"
                send_json(self, 502, {"error": {"message": message}})
            else:
                usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
                send_json(self, 200, {**completion(body, "hello"), "usage": usage})

    server.httpd.RequestHandlerClass = Handler
    return server


def test_a_user_s_openai_call_is_an_openinference_llm_span_under_the_autorl_span_with_its_secrets_redacted(spans):
    """A rollout's own call of an OpenAI client (as ART-style code makes with `model.openai_client()`) against a
    real HTTP server: OpenInference's LLM span, under the autorl span current at the call, in its trace. Its
    attributes hold the request's body, whose messages can hold a secret (a tool's output quoting a URL with its
    credentials or an `Authorization` header), and a failed call's error text (here an upstream URL with its
    credentials): each is redacted; the client's API key (a header) is never recorded."""
    key = "sk-client-key-0123456789-a-header-only"
    server = gateway()
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    question = f"Count the rows of postgres://app:{SECRET}@db.internal/prod"
    output = f"> GET /rows HTTP/1.1\n> Authorization: Bearer {SECRET}\n< HTTP/1.1 200 OK"
    messages = [{"role": "user", "content": question}, {"role": "user", "content": output}]

    async def rollout() -> None:
        with tracing.span("autorl.rollout", {"gen_ai.request.model": "policy"}):
            await client.chat.completions.create(model="policy", messages=messages)
            with pytest.raises(openai.InternalServerError):
                await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "fail"}])

    try:
        asyncio.run(rollout())
    finally:
        server.close()
    assert server.requests[0]["messages"] == messages and server.headers[0]["authorization"] == f"Bearer {key}"
    finished = spans.get_finished_spans()
    (outer,) = [s for s in finished if s.name == "autorl.rollout"]
    answered, failed = [s for s in finished if s.name == "ChatCompletion"]
    for llm in (answered, failed):
        assert llm.attributes["openinference.span.kind"] == "LLM"
        assert llm.parent.span_id == outer.context.span_id and llm.context.trace_id == outer.context.trace_id
    assert answered.attributes["llm.token_count.completion"] == 2
    assert answered.attributes["llm.model_name"] == "policy"
    sent = json.loads(answered.attributes["input.value"])["messages"]  # the request body, as OpenInference keeps it
    assert sent[0]["content"] == "Count the rows of postgres://<redacted>@db.internal/prod"
    assert "> Authorization: Bearer <redacted>" in answered.attributes["llm.input_messages.1.message.content"]
    (error,) = [e for e in failed.events if e.name == "exception"]
    assert "http://<redacted>@gateway.internal/v1" in error.attributes["exception.message"]
    assert "<redacted>" in failed.status.description
    recorded = json.dumps(
        [[dict(s.attributes), [dict(e.attributes) for e in s.events], s.status.description] for s in finished]
    )
    assert SECRET not in recorded and key not in recorded


def test_a_run_s_spans_say_its_input_answers_rewards_models_scoring_calls_and_totals(
    spans, served, chat, tiny_model, tmp_path, monkeypatch
):
    """What a trace view's columns show of the pipeline's own spans (its `Policy` and `StageContext` against
    `autorl serve`'s real app over a scripted model): a rollout's input and answer (`input.value`,
    `output.value`); its reward on an `autorl.reward` span under it, linked to the judging; a program judge's span
    without token counts; the policy named by its base model and step, not its cache key, in autorl's spans and
    OpenInference's; the base model scoring given tokens as one named span with no instrumentation span under it;
    the run span's totals."""
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    config = RunConfig(model=str(tiny_model), backend=served.url)
    task = TaskSpec(description="Say hello.")
    policy = Policy(config, tmp_path / "artifacts", "d6c27c68policykey", Counter(), task, tmp_path / "logs")
    judge = ruler.FunctionJudge(lambda messages: float("hello" in messages[-1]["content"]))
    ctx = StageContext(task, config, None, {}, policy, judge, None, tmp_path, Console(quiet=True))

    async def step() -> TrajectoryGroup:
        with tracing.span("autorl.step", {"autorl.step": 1}):
            group = TrajectoryGroup([await policy.answer("Be brief.", "Greet me.", config) for _ in range(2)])
            scored = await ctx.score(group)
            await policy.base_logprobs(scored.trajectories)
        await policy.aclose()
        return scored

    scored = asyncio.run(step())
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    rollouts = [s for s in finished if s.name == "autorl.rollout"]
    assert [(s.attributes["input.value"], s.attributes["output.value"]) for s in rollouts] == [
        ("Greet me.", "hello")
    ] * 2
    base = str(tiny_model)
    assert {s.attributes["gen_ai.request.model"] for s in rollouts} <= {base, f"{base} + LoRA (newest step)"}
    calls = [s for s in finished if s.name == "ChatCompletion"]  # OpenInference's, under the rollouts' turns
    assert len(calls) == 2 and all("d6c27c68" not in json.dumps(dict(s.attributes)) for s in rollouts)
    (judged,) = [s for s in finished if s.name == "autorl.judge"]
    assert "gen_ai.usage.input_tokens" not in judged.attributes and judged.attributes["autorl.judge.requests"] == 0
    assert judged.attributes["output.value"] == "scores: 1, 1"
    rewards = [s for s in finished if s.name == "autorl.reward"]
    assert sorted(s.parent.span_id for s in rewards) == sorted(s.context.span_id for s in rollouts)
    assert all(
        s.attributes["autorl.reward"] == 1.0 and s.attributes["openinference.span.kind"] == "EVALUATOR" for s in rewards
    )
    assert all([link.context.span_id for link in s.links] == [judged.context.span_id] for s in rewards)
    assert [t.reward for t in scored.trajectories] == [1.0, 1.0]
    (scoring,) = [s for s in finished if s.name == "autorl.base_logprobs"]
    assert scoring.attributes["gen_ai.request.model"] == base and scoring.attributes["autorl.tokens"] > 0
    assert "logprob of each token of 2 answers" in scoring.attributes["input.value"]
    assert not [s for s in finished if s.parent is not None and s.parent.span_id == scoring.context.span_id]
    names = Counter(s.name for s in finished)
    assert names == Counter({"autorl.step": 1, "autorl.rollout": 2, "chat": 2, "ChatCompletion": 2, "autorl.judge": 1,
                             "autorl.reward": 2, "autorl.base_logprobs": 1})  # fmt: skip
    assert all(by_id.get(s.parent.span_id) is not None for s in finished if s.parent is not None)


def test_the_run_span_s_totals_and_a_served_name_shown_as_told(spans):
    record = {
        "status": "done",
        "cost": {"tokens": {"policy": {"prompt": 900, "completion": 300}, "judge": {"prompt": 100, "completion": 20}},
                 "tokens_total": 1320, "usd": {"compute": 0.01, "api": 0.002, "total": 0.012}},
        "stages": {"evaluate": {"summary": {"variants": {"base": {"mean": 0.3}, "latest": {"mean": 0.722}}}}},
    }  # fmt: skip
    totals = run_totals(record)
    assert (totals["autorl.tokens.prompt"], totals["autorl.tokens.completion"], totals["autorl.tokens.total"]) == (
        1000, 320, 1320
    )  # fmt: skip
    assert (totals["autorl.usd"], totals["autorl.reward.base"], totals["autorl.reward.latest"]) == (0.012, 0.3, 0.722)
    assert totals["output.value"] == "held-out reward: base 0.300, latest 0.722; 1320 tokens, $0.0120, done"
    assert "llm.token_count.total" not in totals  # trace views add those up over the spans below
    tracing.name_model("key@0003", "smollm2-135m + LoRA step 3")
    with tracing.span("autorl.rollout", {"gen_ai.request.model": "key@0003", "other": "key@0003"}):
        pass
    (span,) = spans.get_finished_spans()
    assert span.attributes["gen_ai.request.model"] == "smollm2-135m + LoRA step 3"
    assert span.attributes["other"] == "key@0003"  # only the attributes that name a model
