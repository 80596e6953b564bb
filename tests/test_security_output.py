"""Security findings about what autorl prints: every line of the `autorl` command (its error line, log records
and their tracebacks) passes through redaction, run as a user runs it (a subprocess); so does every part of an
exported span."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link

from autorl.redaction import RedactingFilter, RedactingStream
from autorl.span_redaction import RedactingProcessor
from tests.helpers.docs import ROOT
from tests.helpers.limits import scaled
from tests.helpers.remote import free_port

PASSWORD = "Sup3rSecretPassw0rd"


def autorl(*args: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTORL_TOKEN": "a-token-for-the-test", "PYTHONPATH": str(ROOT), "AUTORL_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(100),
    )


def test_security_the_cli_error_line_never_shows_a_urls_password(tmp_path):
    backend = f"http://user:{PASSWORD}@127.0.0.1:{free_port()}"  # nothing listens there
    done = autorl("run", "Reply politely", "--backend", backend, home=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "does not answer" in done.stderr and "http://<redacted>@127.0.0.1:" in done.stderr
    assert PASSWORD not in done.stderr + done.stdout


def raise_with_secret() -> None:
    raise RuntimeError(f"could not reach http://admin:{PASSWORD}@db.internal:5432/x")


def test_security_a_logged_traceback_is_redacted_by_the_filter_and_by_the_stream():
    for redact in ("filter", "stream"):
        out = io.StringIO()
        handler = logging.StreamHandler(RedactingStream(out) if redact == "stream" else out)
        if redact == "filter":
            handler.addFilter(RedactingFilter())
        logger = logging.getLogger(f"autorl.test.{redact}")
        logger.addHandler(handler)
        logger.propagate = False
        try:
            raise_with_secret()
        except RuntimeError:
            logger.exception("failed with token=%s", PASSWORD, stack_info=True)
        finally:
            logger.removeHandler(handler)
        text = out.getvalue()
        assert "Traceback" in text and "raise_with_secret" in text and "http://<redacted>@db.internal" in text, text
        assert PASSWORD not in text, (redact, text)


def test_security_a_spans_name_resource_links_and_events_are_redacted():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.url": f"https://u:{PASSWORD}@collector:4318"}))
    provider.add_span_processor(RedactingProcessor(SimpleSpanProcessor(exporter)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("linked") as other:
        pass
    link = Link(other.get_span_context(), {"from": f"token={PASSWORD}"})
    with tracer.start_as_current_span(f"GET https://h/?api_key={PASSWORD}", links=[link]) as span:
        span.add_event(f"retry Bearer {PASSWORD}")
    (_, exported) = exporter.get_finished_spans()
    text = repr(
        (exported.name, dict(exported.resource.attributes), [dict(x.attributes) for x in exported.links],
         [e.name for e in exported.events])
    )  # fmt: skip
    assert PASSWORD not in text and text.count("<redacted>") == 4, text
