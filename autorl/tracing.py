"""OpenTelemetry traces of a run: a span per run, stage, training step, rollout (its chat turns and tool calls),
judge request and update, named and described by the GenAI semantic conventions where they fit (`chat MODEL`
spans with `gen_ai.*` attributes, `execute_tool NAME`), sent over OTLP/HTTP.

Off by default: `configure(endpoint)` (`--otlp-endpoint URL`, or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` /
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables) turns it on. Off, `span` returns one shared no-op context and
imports nothing. Where openinference-instrumentation-openai is installed, the OpenAI clients of a user's rollout
code are traced too (OpenInference's LLM spans, under the current span): they hold a request's body and a failed
call's error text, never the client's API key or headers. Every string a span exports, autorl's attributes and
OpenInference's alike, goes through `autorl.redaction.redact_text` on its way out (`autorl.span_redaction`): no
URL's credentials, no `Authorization` header's value, no value of a secret-named field.

What a reader of the trace sees first (Phoenix's columns): OpenInference's `input.value` and `output.value` (`io`) on
the run and each rollout; a rollout's reward on an `autorl.reward` span under it (`rewards`); a served model by the
name a person reads (`name_model`: "smollm2-135m + LoRA step 3", not the policy's cache key); calls that are
autorl's own bookkeeping (the base model scoring given tokens) under one span that says what they are, their
instrumentation spans left out (`unrecorded`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import ruler.tracing

from .errors import AutoRLError

if TYPE_CHECKING:
    from .trajectories import Trajectory

SERVICE = "autorl"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_OFF = nullcontext()
_state: dict[str, Any] = {}
"""When on: the `tracer` and its `provider` (and `instrumentor`, OpenInference's, if installed)."""
_names: dict[str, str] = {}
"""What `name_model` was told: a served model's name -> the name spans show."""
TEXT_CHARS = 4000
"""The longest input or output text a span holds (`io`)."""


def enabled() -> bool:
    return "tracer" in _state


def configure(endpoint: str | None = None, exporter: Any = None) -> bool:
    """Turn tracing on when `endpoint` (an OTLP/HTTP traces URL, `http://host:4318/v1/traces`), an
    `OTEL_EXPORTER_OTLP_*` endpoint variable or `exporter` (a span exporter: tests) says where spans go;
    returns whether it is on. A missing package is one AutoRLError line."""
    if enabled():
        return True
    if exporter is None and not endpoint and not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        from .span_redaction import RedactingProcessor
    except ImportError:
        raise AutoRLError(
            "tracing (--otlp-endpoint, OTEL_EXPORTER_OTLP_ENDPOINT) needs opentelemetry-sdk and "
            "opentelemetry-exporter-otlp-proto-http: pip install 'autorl[tracing]'"
        ) from None
    # the project name is Phoenix's (OpenInference) grouping of traces; other backends show it as a resource attribute
    provider = TracerProvider(
        resource=Resource.create({"service.name": SERVICE, "openinference.project.name": SERVICE})
    )
    if exporter is not None:
        processor = SimpleSpanProcessor(exporter)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # an explicit URL is the traces endpoint itself; otherwise the exporter reads the variables
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint or None))
    provider.add_span_processor(RedactingProcessor(processor, _names))  # every span redacted before it is exported
    _state.update(provider=provider, tracer=provider.get_tracer("autorl"))
    ruler.tracing.set_tracer(_state["tracer"])
    try:
        from openinference.instrumentation.openai import OpenAIInstrumentor
    except ImportError:
        pass
    else:
        _state["instrumentor"] = OpenAIInstrumentor()
        _state["instrumentor"].instrument(tracer_provider=provider)
    return True


def shutdown() -> None:
    """Send what is buffered and turn tracing off."""
    if not enabled():
        return
    if instrumentor := _state.pop("instrumentor", None):
        instrumentor.uninstrument()
    ruler.tracing.set_tracer(None)
    _names.clear()
    _state.pop("tracer")
    _state.pop("provider").shutdown()


def span(name: str, attributes: dict[str, Any] | None = None) -> AbstractContextManager[Any]:
    """A span made current for the block (None inside when tracing is off), its attributes `safe`."""
    if not enabled():
        return _OFF
    return _state["tracer"].start_as_current_span(name, attributes=safe({**kind(name), **(attributes or {})}))


KINDS = {
    "chat": "LLM",
    "execute_tool": "TOOL",
    "autorl.rollout": "AGENT",
    "autorl.judge": "EVALUATOR",
    "autorl.reward": "EVALUATOR",
}
"""OpenInference's span kind by the span name's first word (CHAIN for the others), which Phoenix's views use."""


def kind(name: str) -> dict[str, str]:
    return {"openinference.span.kind": KINDS.get(name.split(" ", 1)[0], "CHAIN")}


def current() -> Any:
    """The span current here (a no-op one where none is), to add attributes to; None when tracing is off."""
    if not enabled():
        return None
    from opentelemetry import trace

    return trace.get_current_span()


def set_attributes(span: Any, attributes: dict[str, Any]) -> None:
    """Add `attributes` (made `safe`) to `span`; nothing when it is None (tracing off)."""
    if span is not None:
        span.set_attributes(safe(attributes))


def ids(span: Any) -> dict[str, str]:
    """`trace_id` and `span_id` of `span` in hex, as a trajectory's metadata links to it; {} when off."""
    if span is None:
        return {}
    context = span.get_span_context()
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def safe(attributes: dict[str, Any]) -> dict[str, Any]:
    """Attributes OpenTelemetry takes: None dropped, numbers and lists of numbers kept, other values as text (which
    is redacted on export, as every span's: `autorl.span_redaction`)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, int | float) for v in value):
            out[key] = list(value)
        else:
            out[key] = str(value)
    return out


def io(input: Any = None, output: Any = None) -> dict[str, Any]:
    """OpenInference's input and output of a span (`input.value`, `output.value`: the columns Phoenix shows for
    it), as text of at most `TEXT_CHARS`; a side that is None is left out."""
    sides = {"input.value": input, "output.value": output}
    return {key: str(value)[:TEXT_CHARS] for key, value in sides.items() if value is not None}


def name_model(served: str, shown: str) -> None:
    """Show the model served as `served` (autorl's policy is served under a cache key, `KEY` or `KEY@NNNN`) as
    `shown` in the spans that name it (`span_redaction.MODEL_ATTRIBUTES`) and end from now on, instrumentations' spans included."""
    _names[served] = shown


def rewards(trajectories: Iterable[Trajectory], judging: Any) -> None:
    """Each judged trajectory's reward on a span of its own, `autorl.reward`, under its rollout's span (that span
    ended before its group was judged, and an OpenTelemetry span cannot change once ended) and linked to the
    `judging` span: `autorl.reward`, and as its output (the reward, then the judge's explanation). A trajectory
    whose metadata names no rollout span (`ids`) has none."""
    if judging is None or not enabled():
        return
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

    for trajectory in trajectories:
        trace_id, span_id = trajectory.metadata.get("trace_id"), trajectory.metadata.get("span_id")
        if not (isinstance(trace_id, str) and isinstance(span_id, str)):
            continue
        rollout = SpanContext(int(trace_id, 16), int(span_id, 16), False, TraceFlags(TraceFlags.SAMPLED))
        said = " ".join([f"{trajectory.reward:g}", *trajectory.logs[-1:]])
        attributes = {**kind("autorl.reward"), "autorl.reward": trajectory.reward, **io(output=said)}
        _state["tracer"].start_span(
            "autorl.reward",
            context=trace.set_span_in_context(NonRecordingSpan(rollout)),
            attributes=safe(attributes),
            links=[Link(judging.get_span_context())],
        ).end()


@contextmanager
def unrecorded() -> Iterator[None]:
    """A block whose calls instrumentations do not trace (OpenInference's OpenAI spans: OpenTelemetry's suppression
    key, which they honour); autorl's span around it says what the calls were. Nothing when tracing is off."""
    if not enabled():
        yield
        return
    from opentelemetry import context

    token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        yield
    finally:
        context.detach(token)


class Begun:
    """A span begun by `begin` and made current until `end` (for a loop body too long to indent under `with`)."""

    def __init__(self, name: str, attributes: dict[str, Any] | None):
        self.span = self._token = None
        if enabled():
            from opentelemetry import context, trace

            self.span = _state["tracer"].start_span(name, attributes=safe({**kind(name), **(attributes or {})}))
            self._token = context.attach(trace.set_span_in_context(self.span))

    def end(self, attributes: dict[str, Any] | None = None) -> None:
        """Add `attributes`, end the span and make the one before it current again."""
        if self.span is not None:
            from opentelemetry import context

            set_attributes(self.span, attributes or {})
            self.span.end()
            context.detach(self._token)
            self.span = None


def begin(name: str, attributes: dict[str, Any] | None = None) -> Begun:
    """A span made current until its `end` (nothing when tracing is off)."""
    return Begun(name, attributes)


UPDATE_METRICS = ("loss", "grad_norm", "trained_tokens", "step_time_s", "groups_trained", "reward", "kl_to_base")
"""What an update span records of the step's metrics (as `autorl.update.<name>`)."""


def update_attributes(metrics: dict[str, Any]) -> dict[str, Any]:
    """An update span's attributes: its tokens, loss and time (`UPDATE_METRICS` found in `metrics`)."""
    return {f"autorl.update.{name}": metrics[name] for name in UPDATE_METRICS if name in metrics}
