"""Security findings about what autorl prints: every line of the `autorl` command (its error line, log records
and their tracebacks) passes through redaction, run as a user runs it (a subprocess); so does every part of an
exported span, and `autorl show` of a record that holds one."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link
from typer.testing import CliRunner

from autorl.redaction import RedactingFilter, RedactingStream
from autorl.span_redaction import RedactingProcessor
from pipelines.cli import app as cli
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


def test_security_autorl_show_prints_no_secret_a_run_record_holds(tmp_path):
    """A run record edited by hand (or written by an older autorl) may hold a secret's value: `autorl show` prints
    what it holds through redaction, the title and every stage's figures alike."""
    key, token = "sk-proj-" + "Ab3dEf5hIj7lMn9pQr1tUv3xYz5", "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    record = {
        "status": "done",
        "task": {"description": f"call the API with {key}"},
        "stages": {"inputs": {"summary": {"note": f"token {token}"}}},
    }
    (tmp_path / "runs" / "leaky").mkdir(parents=True)
    (tmp_path / "runs" / "leaky" / "run.json").write_text(json.dumps(record))
    shown = CliRunner().invoke(cli, ["show", "leaky", "--home", str(tmp_path)], terminal_width=200)
    assert shown.exit_code == 0 and "call the API with <redacted>" in shown.output, shown.output
    assert key not in shown.output and token not in shown.output and "token <redacted>" in shown.output
