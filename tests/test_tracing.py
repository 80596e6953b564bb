"""Traces (autorl/tracing.py) read back from OpenTelemetry's in-memory exporter: a step's rollout with its chat
turns and tool call, and a RULER judge's request over real HTTP to a scripted judge, each under its parent with
the GenAI attributes; no attribute holds the judge's key; off, nothing is traced and nothing is imported."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ruler
from autorl import TrajectoryGroup, tracing
from autorl.agents.rollout import agent_rollout
from pipelines.context import judge_attributes
from tests.helpers.agents import call, scripted, with_toolbox
from tests.helpers.chat_server import ChatCompletionServer
from tests.helpers.judge_server import by_content

SECRET = "sk-tracing-0123456789-never-in-a-span"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    assert tracing.configure(exporter=exporter)
    yield exporter
    tracing.shutdown()


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


def test_attributes_are_redacted_and_tracing_off_is_a_shared_no_op():
    assert tracing.safe({"url": f"http://me:{SECRET}@10.0.0.5/v1", "n": 3, "none": None, "xs": [1.0, 2]}) == {
        "url": "http://<redacted>@10.0.0.5/v1",
        "n": 3,
        "xs": [1.0, 2],
    }
    assert not tracing.enabled() and tracing.span("x") is tracing.span("y") and tracing.begin("z").span is None
    # off, the pipeline imports no OpenTelemetry package
    code = "import pipelines.pipeline, sys; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_spans_reach_a_real_otlp_http_receiver_with_their_parents_and_attributes():
    """The OTLP/HTTP exporter as a run uses it (`configure(endpoint)`), against a receiver that decodes the
    protobuf requests as any OTLP backend does."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

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
    try:
        assert tracing.configure(f"http://127.0.0.1:{server.server_port}/v1/traces")
        with tracing.span("autorl.run", {"autorl.run": "r", "judge": f"m@http://u:{SECRET}@10.0.0.5/v1"}):
            step = tracing.begin("autorl.step", {"autorl.step": 1})
            with tracing.span("autorl.update") as span:
                tracing.set_attributes(span, tracing.update_attributes({"loss": -0.25, "trained_tokens": 96}))
            step.end({"autorl.reward": 0.5})
        tracing.shutdown()  # flushes the batch
    finally:
        tracing.shutdown()
        server.shutdown()
    assert {path for path, _ in received} == {"/v1/traces"}
    spans = [s for _, r in received for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
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
