"""Security round 3's smaller findings, one test each: names that read as flags, a hand-edited run record,
`/log` bodies that were 500s (an empty trajectory, a 300-digit step), a TLS certificate that is no PEM."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from autorl import TrainableModel
from autorl.backends.remote.client import RemoteBackend
from autorl.backends.remote.limits import ServeLimits
from autorl.backends.remote.wire import check_name
from autorl.errors import AutoRLError
from pipelines.cli import app as cli
from pipelines.config import check_run_name
from tests.helpers.cli import TASK, run_error_line
from tests.helpers.remote import Harness, ScriptedPlacement, call, free_port, register_body


@pytest.mark.parametrize("name", ["-rf", "--help", "-"])
def test_security_a_name_that_reads_as_a_flag_is_refused(name):
    with pytest.raises(AutoRLError, match=r"no leading '\.' or '-'"):
        check_name(name)
    with pytest.raises(AutoRLError, match=r"no leading '\.' or '-'"):
        check_run_name(name)
    assert check_name("a-b") == "a-b" and check_run_name("_x-1") == "_x-1"


def test_security_a_run_record_with_a_field_of_another_type_is_one_skipped_line(tmp_path):
    for name, record in {
        "good": {"status": "done", "task": {"description": "t"}},
        "odd": {"status": 5, "task": {"description": "t"}},
        "worse": {
            "status": "done",
            "task": {},
            "stages": {"evaluate": {"summary": {"variants": {"base": {"mean": "x"}}}}},
        },
    }.items():
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_text(json.dumps(record))
    result = CliRunner().invoke(cli, ["runs", "--home", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "good" in result.output and "odd" in result.output and "5" in result.output
    assert "skipped: worse: its run.json does not hold a run's record (ValueError)" in " ".join(result.output.split())


def test_security_log_bodies_that_were_500s_are_400s(tmp_path, chat, tiny_model):
    harness = Harness(tmp_path, chat)
    try:
        assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
        for body in (
            {"groups": [{"trajectories": [{"messages_and_choices": [], "reward": 1.0}]}]},
            {"groups": [], "metrics": {"val/reward": 1.0}, "step": int("9" * 300)},
        ):
            answer = call("POST", f"{harness.url}/models/agent/log", content=json.dumps(body))
            assert answer.status_code == 400, (body, answer.text)
    finally:
        harness.stop()


def test_security_serve_with_a_certificate_that_is_no_pem_is_one_line(tmp_path):
    cert, key = tmp_path / "notpem.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    result = CliRunner().invoke(
        cli, ["serve", "--home", str(tmp_path), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"{cert} and {key} are not a PEM certificate and its unencrypted key" in " ".join(result.output.split())


def test_security_run_values_that_failed_late_are_refused_before_anything_starts(run, tmp_path):
    empty = tmp_path / "inputs.jsonl"
    empty.write_text("\n  \n")
    for flags, says in (
        (["--inputs-file", str(empty)], f"error: --inputs-file: inputs file {empty} is empty"),
        (["--steps", "1000000000000"], "error: --steps: Input should be less than or equal to 1000000"),
        (["--otlp-endpoint", "notaurl"], "error: --otlp-endpoint: 'notaurl' is not an OTLP/HTTP URL"),
    ):
        assert run_error_line(TASK, *flags).startswith(says), flags
    assert run(TASK, "--otlp-endpoint", "http://127.0.0.1:6006/v1/traces")[1].otlp_endpoint.endswith("/v1/traces")


class FailingPlacement(ScriptedPlacement):
    """A placement whose model servers fail to start for names starting with "bad" (as vLLM does for a base
    model it cannot load), after the run directory was made."""

    async def start_serving(self, model, run_dir):
        if model.name.startswith("bad"):
            raise AutoRLError(f"the vLLM server of {model.name} did not start")
        return await super().start_serving(model, run_dir)


def test_security_failed_registrations_hold_no_room_and_leave_no_directory(tmp_path, chat, tiny_model):
    harness = Harness(tmp_path, chat, limits=ServeLimits(max_models_per_client=2))
    harness.served.backend.placement = FailingPlacement(chat, harness.served.backend.placement.server_config)
    try:
        for index in range(5):
            bad = register_body(tiny_model, name=f"bad{index}")
            answer = call("POST", f"{harness.url}/models", content=json.dumps(bad))
            assert 400 <= answer.status_code < 500 and answer.status_code != 429, answer.text
        assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
        assert sorted(p.name for p in (tmp_path / "models").glob("*/*")) == ["agent"]
    finally:
        harness.stop()


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda b, m: b.log(m, [], "val", {"val/re\x00ward": 1.0}, None), r"metrics\.'val/re\\x00ward'\.\[key\]: "),
        (lambda b, m: b.log(m, [], "val", {"x" * 300: 1.0}, None), r"metrics\.'xxx.*\(300 characters\)\.\[key\]"),
        (lambda b, m: b.log(m, [], "val", {"val/reward": float("nan")}, None), r"metrics\.val/reward: .*finite"),
        (lambda b, m: b.log(m, [], "a b", {}, None), r"split: String should match pattern"),
        (lambda b, m: b.log(m, [], "val", {}, 10**12), r"step: Input should be less than or equal to 999999999"),
        (lambda b, m: b.delete_checkpoints(m, "val\nreward", "best"), r"best_checkpoint_metric: String should"),
        (lambda b, m: b.serve_checkpoint(m, -1), r"step: Input should be greater than or equal to 0"),
    ],
)
def test_security_a_request_the_client_cannot_send_is_one_line_before_anything_is_sent(call, says):
    """What `RemoteBackend` would send that the server's wire models refuse (a metric named with a control
    character, or too long; a figure that is not finite; a step past the highest) is one `AutoRLError` line
    naming the call and the field, not pydantic's ValidationError, and nothing is sent: no server listens there."""
    backend = RemoteBackend(f"http://127.0.0.1:{free_port()}", api_key="k" * 32, retries=0)
    with pytest.raises(AutoRLError, match=says) as raised:
        asyncio.run(call(backend, TrainableModel(name="m")))
    line = str(raised.value)
    assert line.startswith("RemoteBackend ") and " of 'm': " in line and line.isprintable() and len(line) < 300, line
