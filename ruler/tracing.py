"""Spans of the judge's requests, for an application that traces (OpenTelemetry): off until it hands a tracer
over (`set_tracer`), and then every request is a span under whatever span is current where the judge was
asked. ruler imports no tracing package itself: with no tracer set, `span` costs one attribute read."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

_tracer: Any = None
_OFF = nullcontext()


def set_tracer(tracer: Any) -> None:
    """Trace the judge's requests with `tracer` (an OpenTelemetry `Tracer`; None: stop)."""
    global _tracer
    _tracer = tracer


def span(name: str, attributes: dict[str, Any]) -> AbstractContextManager[Any]:
    """A span made current for the block (None inside when tracing is off); `attributes` must hold no secret."""
    if _tracer is None:
        return _OFF
    return _tracer.start_as_current_span(name, attributes=attributes)
