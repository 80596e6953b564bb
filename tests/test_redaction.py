"""Nothing leaks: secrets are redacted in what a run writes (run.json, the W&B config, logs, reports, a
benchmark's records), names kept and values not; files take the user's umask and run directories are private.
The end-to-end check over every file real runs wrote is tests/test_pipeline_e2e.py's
test_no_file_a_run_wrote_holds_the_api_key."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from autorl.atomic import atomic_text, private_dir
from autorl.errors import AutoRLError
from autorl.redaction import REDACTED, RedactingFilter, is_secret_name, redact_text, redacted
from autorl.task import McpServerSpec, TaskSpec
from autorl.tracking import Tracker
from pipelines.artifacts import ArtifactStore, write_json
from pipelines.config import RunConfig
from pipelines.pipeline import RUN_FILE, _open_record

SECRET = "s3cret-0123456789-never-written"
CREDENTIALED = f"m@http://judge:{SECRET}@10.0.0.5:8000/v1"


def secret_task() -> TaskSpec:
    server = McpServerSpec(command=["python", "server.py"], env={"NOTES_TOKEN": SECRET, "MODE": "x"})
    return TaskSpec(description="Take notes", mcp_servers=[server])


def test_values_are_redacted_and_names_kept():
    record = {
        "task": secret_task().model_dump(mode="json"),
        "judge": CREDENTIALED,
        "headers": {"X-Api-Key": SECRET},
        "HF_TOKEN": SECRET,
        "openaiApiKey": SECRET,
        "db_password": SECRET,
        "extra_args": ["--api-key", SECRET, f"--token={SECRET}", "--max-model-len", "2048"],
        "api_key_env": "MY_KEY",  # a variable's name, not its value
        "pass_env": ["GITHUB_TOKEN"],
    }
    clean = redacted(record)
    assert SECRET not in json.dumps(clean)
    assert clean["task"]["mcp_servers"][0]["env"] == {"NOTES_TOKEN": REDACTED, "MODE": REDACTED}
    assert clean["judge"] == "m@http://<redacted>@10.0.0.5:8000/v1"
    assert (
        clean["headers"] == {"X-Api-Key": REDACTED}
        and clean["HF_TOKEN"] == clean["openaiApiKey"] == clean["db_password"] == REDACTED
    )
    assert clean["extra_args"] == ["--api-key", REDACTED, "--token=<redacted>", "--max-model-len", "2048"]
    assert clean["api_key_env"] == "MY_KEY" and clean["pass_env"] == ["GITHUB_TOKEN"]
    assert record["HF_TOKEN"] == SECRET  # a copy: the record itself is untouched


def test_no_setting_of_autorl_is_taken_for_a_secret():
    """The configs' own fields (max_tokens, kv_cache_bytes, ...) come through redaction unchanged."""
    full = {"config": RunConfig().model_dump(mode="json"), "task": TaskSpec(description="d").model_dump(mode="json")}
    assert redacted(full) == full
    assert not any(
        is_secret_name(name) for name in ("max_tokens", "max_completion_tokens", "keys", "tokenizer", "author")
    )


def test_urls_lose_their_credentials_and_nothing_else():
    assert redact_text(f"see https://user:{SECRET}@host/x and http://tok@h:1/v1") == (
        "see https://<redacted>@host/x and http://<redacted>@h:1/v1"
    )
    for text in ("m@http://127.0.0.1:8000/v1", "name@example.com", "http://host/a@b", "embedded"):
        assert redact_text(text) == text


def test_log_lines_lose_url_credentials(caplog):
    logger = logging.getLogger("test_redaction")
    handler = logging.Handler()
    seen: list[str] = []
    handler.emit = lambda record: seen.append(record.getMessage())
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    try:
        logger.warning("judge %s failed", CREDENTIALED)
    finally:
        logger.removeHandler(handler)
    assert seen == ["judge m@http://<redacted>@10.0.0.5:8000/v1 failed"]


@pytest.fixture
def umask_077():
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_run_json_holds_no_secret_and_honours_the_umask(tmp_path, umask_077):
    config = RunConfig(home=tmp_path, judge=CREDENTIALED, generator=CREDENTIALED)
    run_dir = tmp_path / "runs" / "r"
    record = _open_record(run_dir, "r", secret_task(), config)
    write_json(run_dir / RUN_FILE, record)
    text = (run_dir / RUN_FILE).read_text()
    assert SECRET not in text
    assert json.loads(text)["task"]["mcp_servers"][0]["env"] == {"NOTES_TOKEN": REDACTED, "MODE": REDACTED}
    assert json.loads(text)["config"]["judge"] == "m@http://<redacted>@10.0.0.5:8000/v1"
    assert mode(run_dir / RUN_FILE) == 0o600  # was forced to 0644 whatever the umask
    for directory in (tmp_path / "runs", run_dir):
        assert mode(directory) == 0o700


def test_files_take_the_umask_and_run_directories_are_private_by_default(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_text(tmp_path / "f.txt", "x")
        assert mode(tmp_path / "f.txt") == 0o644
        os.umask(0o027)
        atomic_text(tmp_path / "g.txt", "x")
        assert mode(tmp_path / "g.txt") == 0o640
        os.umask(0o022)
        made = private_dir(tmp_path / "home" / "runs" / "r")
        assert [mode(p) for p in (tmp_path / "home", tmp_path / "home" / "runs", made)] == [0o700] * 3
        store = ArtifactStore(tmp_path / "existing-home" / "artifacts")
        (tmp_path / "existing-home").mkdir(mode=0o755)
        with store.write("inputs", "k", {}) as out:
            (out / "inputs.jsonl").write_text("")
        assert mode(store.root) == 0o700 and mode(store.path("inputs", "k") / "inputs.jsonl") == 0o644
        (tmp_path / "shared").mkdir(mode=0o755)
        assert mode(private_dir(tmp_path / "shared")) == 0o755  # one that exists is left as it is
    finally:
        os.umask(old)


@pytest.mark.timeout(120)  # W&B's offline start: ~3 s
def test_no_wandb_file_holds_a_secret_of_the_config_or_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr("sys.argv", ["autorl", "run", "TASK", "--judge", CREDENTIALED])  # W&B would record it
    tracker = Tracker(True, tmp_path, "r", "abc123", RunConfig(judge=CREDENTIALED).model_dump(mode="json"))
    tracker.log({"reward": 0.5}, step=1)
    tracker.finish()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files), files
    assert [p for p in files if SECRET.encode() in p.read_bytes()] == []
    assert any(b"10.0.0.5:8000" in p.read_bytes() for p in files)  # the config itself was written


def test_a_benchmark_reads_the_env_values_run_json_does_not_keep_from_the_task_file(tmp_path):
    from collections import Counter

    from autorl.task import load_task
    from pipelines.benchmark.variants import RunView

    task_file = tmp_path / "notes.toml"
    task_file.write_text(
        f'description = "Take notes"\n[[mcp_servers]]\ncommand = ["python", "s.py"]\nenv = {{ NOTES_TOKEN = "{SECRET}" }}\n'
    )
    run_dir = tmp_path / "runs" / "r"
    record = _open_record(run_dir, "r", load_task(task_file), RunConfig(home=tmp_path))
    write_json(run_dir / RUN_FILE, {**record, "keys": {"train": "k"}})
    assert SECRET not in (run_dir / RUN_FILE).read_text() and str(task_file) in (run_dir / RUN_FILE).read_text()
    assert RunView(tmp_path, "r", Counter()).task.mcp_servers[0].env == {"NOTES_TOKEN": SECRET}
    task_file.write_text(task_file.read_text().replace('"python", "s.py"', '"python", "other.py"'))
    with pytest.raises(AutoRLError, match=r"run 'r': run.json does not keep its MCP servers' env values"):
        RunView(tmp_path, "r", Counter())
