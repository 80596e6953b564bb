"""Tracing on, into OpenTelemetry's in-memory exporter (`autorl.tracing.configure(exporter=...)`), for a test that
reads back the spans it made: the `spans` fixture (registered in conftest.py)."""

from __future__ import annotations

import pytest

from autorl import tracing


@pytest.fixture
def spans():
    """The exporter every span of the test reaches once ended (redacted, as any exporter gets them); tracing is
    turned off after the test."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    assert tracing.configure(exporter=exporter)
    yield exporter
    tracing.shutdown()
