"""A user's mistake ends in one clear error line and a non-zero exit, before anything is half-written."""

import json
import os
import socket

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.helpers.cli import error_line
from tests.helpers.processes import descendants, wait_gone, with_command_line

TASK = "Reply to a customer asking for a refund, politely, in two sentences"


def run_cli(*args: str):
    return CliRunner().invoke(app, ["run", *args])


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


@pytest.mark.usefixtures("own_servers")  # looks at the processes the run started
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
    servers = lambda: with_command_line(descendants(os.getpid()), b"vllm.entrypoints")  # noqa: E731
    before = servers()
    result = run_cli(TASK, "--model", str(broken), "--home", str(tmp_path / "home"))
    assert result.exit_code == 1
    assert "vLLM server exited during start-up; last log lines:" in result.output
    assert not list((tmp_path / "home").rglob("checkpoints/*")), "no checkpoint written"
    # the embedded judge's server, started beside the policy's, is stopped with the run (not at this test's exit)
    assert not wait_gone(servers() - before, 30), "the embedded server started for the run outlived it"


def test_a_backend_that_is_down_or_unset_is_one_line_before_any_server(tmp_path, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.delenv("AUTORL_TOKEN", raising=False)
    assert "set AUTORL_TOKEN" in error_line(run_cli(TASK, "--backend", down, "--home", str(tmp_path)))
    monkeypatch.setenv("AUTORL_TOKEN", "a-token")
    line = error_line(run_cli(TASK, "--backend", down, "--home", str(tmp_path)))
    assert line == f"error: autorl server {down} does not answer (ConnectError): is `autorl serve` running there?"


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


# --- inputs accepted, then failing late (issue 26): each is one line before any server starts ---------------


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--lr", "inf", "error: --learning-rate: Input should be a finite number"),
        ("--lr", "nan", "error: --learning-rate: Input should be a finite number"),
        ("--temperature", "inf", "error: --temperature: Input should be a finite number"),
        ("--port", "70000", "error: --port: Input should be less than or equal to 65535"),
        ("--port", "0", "error: --port: Input should be greater than or equal to 1"),
    ],
)
def test_a_number_no_run_can_use_is_refused_by_its_flag(tmp_path, flag, value, expected):
    assert error_line(run_cli(TASK, flag, value, "--home", str(tmp_path))) == expected
    assert not (tmp_path / "runs").exists()


def test_a_judge_that_is_part_of_python_is_refused_and_leaves_nothing_behind(tmp_path):
    for judge in ("os:system", "builtins:len", "json:dumps"):
        line = error_line(run_cli(TASK, "--judge", judge, "--home", str(tmp_path)))
        assert line.startswith(f"error: judge '{judge}' is part of Python itself, not a judge"), line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "locks").exists()  # no run directory, no lock
    (tmp_path / "judges.py").write_text("def two(messages, reference):\n    return 1.0\n")
    line = error_line(run_cli(TASK, "--judge", f"{tmp_path / 'judges.py'}:two", "--home", str(tmp_path)))
    assert "takes (messages, reference): a judge function takes one argument" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "locks").exists()


def test_a_task_path_is_a_task_file_or_refused_never_taken_as_the_tasks_text(tmp_path):
    upper = tmp_path / "Task.TOML"
    upper.write_text("description = [not toml")
    assert f"task file {upper} is not valid TOML" in error_line(run_cli(str(upper), "--home", str(tmp_path)))
    binary = tmp_path / "bin.dat"
    binary.write_bytes(bytes(range(256)))
    line = error_line(run_cli(str(binary), "--home", str(tmp_path)))
    assert line.startswith(f"error: {binary} is a file, not a task file (a task file's name ends in .toml)")
    assert not (tmp_path / "runs").exists()


def test_a_description_longer_than_the_limit_is_one_line(tmp_path):
    line = error_line(run_cli("Reply politely. " * 7500, "--home", str(tmp_path)))  # 120 KB
    assert line.startswith("error: task: field 'description': String should have at most 20000 characters")


def test_inputs_checks_its_out_path_before_generating(tmp_path):
    """The generator would fail (nothing listens on port 9); the path is refused first, so no input is lost."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    (tmp_path / "a-dir.jsonl").mkdir()
    for out, why in (
        (blocker / "inputs.jsonl", f"{blocker} is a file, not a directory"),
        (tmp_path / "a-dir.jsonl", "it is a directory"),
    ):
        result = CliRunner().invoke(app, ["inputs", TASK, "--out", str(out), "--generator", "m@http://127.0.0.1:9/v1"])
        assert error_line(result) == f"error: cannot write {out} ({why})"


@pytest.mark.parametrize("damage", [b'{"name": "broken", "task": {"descr', bytes(range(256)), b"[1, 2]"])
def test_a_damaged_run_record_is_one_line_naming_the_file(tmp_path, damage):
    for name, content in (("broken", damage), ("fine", b'{"name": "fine", "task": {"description": "a task"}}')):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_bytes(content)
    path = tmp_path / "runs" / "broken" / "run.json"
    line = error_line(CliRunner().invoke(app, ["show", "broken", "--home", str(tmp_path)]))
    assert line.startswith(f"error: run record {path} is damaged (")
    listed = CliRunner().invoke(app, ["runs", "--home", str(tmp_path)])
    assert listed.exit_code == 0 and "fine" in listed.output and listed.exception is None
    assert [line for line in listed.output.splitlines() if line.startswith("skipped:")] == [
        line.replace("error:", "skipped:")
    ]


def test_run_names_are_checked_everywhere(tmp_path):
    outside = tmp_path / "other" / "runs" / "theirs"
    outside.mkdir(parents=True)
    (outside / "run.json").write_text('{"name": "theirs", "task": {"description": "not yours"}, "keys": {}}')
    home = tmp_path / "home"
    for command in (["show", "../../other/runs/theirs"], ["benchmark", "../../other/runs/theirs"]):
        line = error_line(CliRunner().invoke(app, [*command, "--home", str(home)]))
        assert "'../../other/runs/theirs' is not a run name" in line, line
    (home / "runs" / "mine").mkdir(parents=True)
    record = {"name": "mine", "task": {"description": "d"}, "keys": {"train": "k"}, "config": {}}
    (home / "runs" / "mine" / "run.json").write_text(json.dumps(record))
    (tmp_path / "inputs.jsonl").write_text('{"input": "hello"}\n')
    variant = ["--variants", "..@latest", "--inputs", str(tmp_path / "inputs.jsonl")]
    line = error_line(CliRunner().invoke(app, ["benchmark", "mine", *variant, "--home", str(home)]))
    assert "'..' is not a run name" in line, line
