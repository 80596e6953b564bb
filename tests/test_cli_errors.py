"""A user's mistake ends in one clear error line and a non-zero exit, before anything is half-written."""

import json
import socket

import pytest
from typer.testing import CliRunner

from pipelines.cli import app

TASK = "Reply to a customer asking for a refund, politely, in two sentences"


def run_cli(*args: str):
    return CliRunner().invoke(app, ["run", *args])


def error_line(result) -> str:
    """The run's single error line; it must be the last thing printed."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and result.output.rstrip().endswith(errors[0]), result.output
    return errors[0]


def test_empty_task(tmp_path):
    assert "task is empty" in error_line(run_cli("   ", "--home", str(tmp_path)))


def test_unknown_model(tmp_path):
    line = error_line(run_cli(TASK, "--model", "embedded:gpt-17", "--home", str(tmp_path)))
    assert "unknown embedded model 'embedded:gpt-17'" in line
    line = error_line(run_cli(TASK, "--model", str(tmp_path / "missing"), "--home", str(tmp_path)))
    assert "neither an embedded model" in line


def test_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert "is not writable" in error_line(run_cli(TASK, "--home", str(blocker)))


def test_port_in_use(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert f"port {port} on 127.0.0.1 is in use" in error_line(
            run_cli(TASK, "--home", str(tmp_path), "--port", str(port))
        )


def test_group_size_one_gives_no_signal(tmp_path):
    assert "--group-size" in error_line(run_cli(TASK, "--group-size", "1", "--home", str(tmp_path)))


@pytest.mark.slow
@pytest.mark.timeout(180)  # vLLM's import and a failed start: well under a minute
def test_vllm_failing_to_start_shows_its_log(tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    # Sizes the KV cache like a small llama; vLLM then fails on the architecture.
    config = {
        "model_type": "llama",
        "architectures": ["NoSuchArch"],
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 64,
        "max_position_embeddings": 2048,
    }
    (broken / "config.json").write_text(json.dumps(config))
    result = run_cli(TASK, "--model", str(broken), "--home", str(tmp_path / "home"))
    assert result.exit_code == 1
    assert "vLLM server exited during start-up; last log lines:" in result.output
    assert not list((tmp_path / "home").rglob("checkpoints/*")), "no checkpoint written"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="on CUDA, unsloth may run")
def test_unsloth_on_a_cpu_machine_is_one_line_before_any_server(tmp_path):
    assert '"unsloth" needs a CUDA GPU' in error_line(run_cli(TASK, "--engine", "unsloth", "--home", str(tmp_path)))


def test_benchmark_options_come_from_its_config(tmp_path):
    """`autorl benchmark`'s options are BenchmarkConfig's fields: its help, its checks, its defaults."""
    runner = CliRunner()
    help_text = runner.invoke(app, ["benchmark", "--help"], env={"COLUMNS": "250"}).output
    assert "Answers per variant and input" in help_text and "unset: base and RUN@latest" in help_text
    line = error_line(runner.invoke(app, ["benchmark", "some-run", "--samples", "0", "--home", str(tmp_path)]))
    assert line == "error: --samples: Input should be greater than or equal to 1"
    line = error_line(
        runner.invoke(app, ["benchmark", "some-run", "--variants", "base,x@latest", "--home", str(tmp_path)])
    )
    assert line.startswith("error: no run named 'some-run'")
