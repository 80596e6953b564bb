"""Secrets kept out of the spans autorl's tracing exports (`autorl.tracing`): every ended span reaches the exporting
processor as a copy whose name, string attributes, event names and attributes (a recorded exception's message),
links' attributes, resource attributes and status description went through `autorl.redaction.redact_text`. It covers the spans of every instrumentation, not only
autorl's own: OpenInference's OpenAI spans hold a request's body (its messages, where a tool's output or a user's
text can quote a URL with its credentials or an `Authorization` header) and a failed call's error text, which may
quote an upstream URL with its credentials.

A module of its own because it imports OpenTelemetry's SDK, which `autorl.tracing` imports only once tracing is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import Link, Status

from .redaction import redact_text


class RedactingProcessor(SpanProcessor):
    """Passes each span, redacted once it has ended (`redacted_span`), to `processor`: the one that exports it.
    `names`: model names to show in their place (`autorl.tracing.name_model`), read as each span ends."""

    def __init__(self, processor: SpanProcessor, names: Mapping[str, str] | None = None):
        self.processor = processor
        self.names = names if names is not None else {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.processor.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self.processor.on_end(redacted_span(span, self.names))

    def shutdown(self) -> None:
        self.processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.processor.force_flush(timeout_millis)


def redacted_span(span: ReadableSpan, names: Mapping[str, str] | None = None) -> ReadableSpan:
    """A copy of the ended `span` with its name, attributes, events, links' attributes, resource and status
    description redacted, and a model its attributes name shown by its name in `names` if it has one there."""
    status = span.status
    if status.description:  # an error's: OpenInference writes the exception's text there
        status = Status(status.status_code, redact_text(status.description))
    resource = span.resource
    if resource is not None:
        resource = Resource(redacted_attributes(resource.attributes), resource.schema_url)
    return ReadableSpan(
        name=redact_text(span.name),
        context=span.context,
        parent=span.parent,
        resource=resource,
        attributes=redacted_attributes(named(span.attributes, names or {})),
        events=[Event(redact_text(e.name), redacted_attributes(e.attributes), e.timestamp) for e in span.events],
        links=[Link(link.context, redacted_attributes(link.attributes)) for link in span.links],
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


MODEL_ATTRIBUTES = ("llm.model_name", "gen_ai.request.model", "gen_ai.response.model")
"""The attributes that name a model, OpenInference's and the GenAI conventions'."""


def named(attributes: Mapping[str, Any] | None, names: Mapping[str, str]) -> Mapping[str, Any] | None:
    """`attributes` with each model `MODEL_ATTRIBUTES` name that `names` has shown by its name there."""
    found = {key: (attributes or {}).get(key) for key in MODEL_ATTRIBUTES}
    renamed = {key: names[value] for key, value in found.items() if isinstance(value, str) and value in names}
    return {**attributes, **renamed} if renamed and attributes is not None else attributes


def redacted_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """`attributes` with every string, alone or in a sequence, redacted; other values as they are."""
    out: dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        if isinstance(value, str):
            out[key] = redact_text(value)
        elif isinstance(value, list | tuple):
            out[key] = [redact_text(v) if isinstance(v, str) else v for v in value]
        else:
            out[key] = value
    return out
