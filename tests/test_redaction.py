"""Nothing leaks: secrets are redacted in what a run writes (run.json, the W&B config, logs, reports, a
benchmark's records), names kept and values not; files take the user's umask and run directories are private.
The end-to-end check over every file real runs wrote is tests/test_pipeline_e2e.py's
test_no_file_a_run_wrote_holds_the_api_key."""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autorl.atomic import atomic_text, private_dir
from autorl.errors import AutoRLError
from autorl.redaction import REDACTED, RedactingFilter, is_secret_name, redact_text, redacted
from autorl.task import McpServerSpec, TaskSpec
from autorl.tracking import Tracker
from pipelines.artifacts import ArtifactStore, write_json
from pipelines.config import RunConfig
from pipelines.records.run import RUN_FILE
from pipelines.staged_run import _open_record

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


def test_a_benchmark_reads_the_env_values_run_json_does_not_keep_from_the_task_file_and_an_export_needs_none(tmp_path):
    from collections import Counter

    from autorl.task import load_task
    from pipelines.benchmarking.variants import RunView

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
    assert RunView(tmp_path, "r", Counter(), connect=False).task.mcp_servers[0].env == {"NOTES_TOKEN": "<redacted>"}


# --- every shape a secret takes in a task or a run's settings, by rule ---------------------------------------

SHAPES: list = [
    "https://mcp.example.com/sse?api_key={s}",  # an MCP server's url
    "m@http://10.0.0.5:8000/v1?key={s}",  # a judge or generator with its key in the query
    "wss://stream.example.com/v1?v=2&token={s}",
    "https://gen.example.com/v1#access_token={s}",  # a fragment's parameters
    "https://hooks.example.com/services/{s}/send",  # a token as a path segment
    "http://user:{s}@10.0.0.5/v1",
    "postgres://app:{s}@db:5432/notes",
    "http://{s}@gateway/v1",
    ["env", "OPENAI_API_KEY={s}", "python", "server.py"],
    ["env", "MY_SERVICE_CRED={s}", "node", "server.js"],
    ["docker", "run", "-e", "NOTES_DB_URL={s}", "notes-mcp"],
    ["npx", "mcp-remote", "https://x.example.com/sse", "--header", "Authorization: Bearer {s}"],
    ["npx", "mcp-remote", "https://x.example.com/sse", "--header", "X-Team:{s}"],
    ["curl", "-H", "X-Api-Key: {s}", "https://x.example.com"],
    ["curl", "--header=X-Anything: {s}", "https://x.example.com"],
    ["sh", "-c", "TOKEN={s} python server.py"],
    ["bash", "-c", "export GITHUB_TOKEN={s}; exec github-mcp"],
    ["tool", "-k", "{s}"],
    ["mysql", "-p", "{s}"],
    ["tool", "--key", "{s}"],
    ["tool", "--token={s}"],
    ["python", "s.py", "--openai-api-key", "{s}"],
    {"headers": {"X-Anything": "{s}"}},
    {"env": {"MODE": "{s}"}},
    {"HF_TOKEN": "{s}"},
    {"dbPassword": "{s}"},
    "the judge said 401 to Authorization: Bearer {s}",  # an error line
    'config was {{"api_key": "{s}", "model": "m"}}',  # JSON inside a string
    "connect with password={s} then",
    "Authorization: Basic {s}==",
    "Proxy-Authorization: Digest {s}",  # a scheme and credentials in any alphabet
]
"""Where secrets go in tasks and settings: URLs (query, fragment, userinfo, path), commands (env assignments,
headers, flags, shell strings), tables and text."""
PLAIN = [
    "m@http://127.0.0.1:8000/v1",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/resolve/main/config.json",
    ["python", "-m", "server", "--port", "8000", "--max-tokens", "64"],
    "Basic arithmetic: X=5 and y = 3; max_tokens=64",
    {"max_tokens": 64, "tokenizer": "t", "MODE": "fast"},
]
"""What redaction leaves alone: names, model paths, ports, settings and prose."""


def planted(shape: Any, secret: str) -> Any:
    if isinstance(shape, str):
        return shape.format(s=secret)
    if isinstance(shape, list):
        return [planted(item, secret) for item in shape]
    return {key: planted(value, secret) for key, value in shape.items()}


def test_each_shape_of_secret_is_redacted_and_plain_values_are_kept():
    assert len(SHAPES) >= 20
    for shape in SHAPES:
        clean = json.dumps(redacted({"value": planted(shape, SECRET_TOKEN)}))
        assert SECRET_TOKEN not in clean and REDACTED in clean, clean
    assert redacted(PLAIN) == PLAIN
    assert redacted(["env", "OPENAI_API_KEY=x", "python"]) == ["env", f"OPENAI_API_KEY={REDACTED}", "python"]
    assert redact_text(f"https://h/v1/{SECRET_TOKEN}?a=1#b=2") == f"https://h/v1/{REDACTED}?a={REDACTED}#b={REDACTED}"
    assert redacted(["curl", "-H", "Authorization: Bearer x"]) == ["curl", "-H", f"Authorization: {REDACTED}"]
    assert "dXNlcjpwYXNz" not in redact_text("Authorization: Basic dXNlcjpwYXNz")  # base64 of user:pass, no digit


SECRET_TOKEN = "Zq8vN2kLp0RtYw5sXc3mBd7f"
secret_text = st.text(string.ascii_letters + string.digits, min_size=20, max_size=48).filter(
    lambda text: any(c.isdigit() for c in text) and any(c.isalpha() for c in text)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=secret_text, shape=st.sampled_from(SHAPES), separator=st.sampled_from(["", "-", "_", "."]))
def test_a_random_secret_planted_in_any_shape_is_never_kept(secret, shape, separator):
    if "/services/" not in str(shape):  # a path segment's token keeps a 16-character run: see looks_like_token
        secret = secret[:10] + separator + secret[10:]
    assert secret not in json.dumps(redacted({"value": planted(shape, secret)}))


def test_a_run_record_and_the_wandb_files_hold_no_secret_of_any_shape(tmp_path, monkeypatch):
    """Every shape at once, as a task file and flags carry them: run.json (`_open_record`) and W&B's offline
    files (the config and the command line W&B sees)."""
    secret = secrets.token_hex(16)
    urls = [planted(s, secret) for s in SHAPES if isinstance(s, str) and s.startswith("http")]
    commands = [planted(s, secret) for s in SHAPES if isinstance(s, list)]
    servers = [McpServerSpec(command=command) for command in commands]
    servers += [McpServerSpec(url=url) for url in urls if url.startswith("http")]
    servers.append(McpServerSpec(command=["python", "s.py"], env={"ANY": secret}))
    task = TaskSpec(description="Take notes", mcp_servers=servers)
    judge = planted("m@http://10.0.0.5:8000/v1?key={s}", secret)
    config = RunConfig(home=tmp_path, judge=judge, generator=planted("m@http://{s}@gateway/v1", secret))
    run_dir = tmp_path / "runs" / "r"
    record = _open_record(run_dir, "r", task, config)
    write_json(run_dir / RUN_FILE, record)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr("sys.argv", ["autorl", "run", "TASK", "--judge", judge])
    tracker = Tracker(True, tmp_path / "wandb", "r", "abc123", record["config"] | {"task": record["task"]})
    tracker.log({"reward": 0.5}, step=1)
    tracker.finish()
    import wandb

    wandb.teardown()  # W&B's service writes the run's .wandb file on its own time; it is whole once it stops
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 3 and any(p.suffix == ".wandb" for p in files)
    assert [p for p in files if secret.encode() in p.read_bytes()] == []
    assert any(b"10.0.0.5:8000" in p.read_bytes() for p in files if p.suffix == ".wandb")  # the config was written
    assert len(json.loads((run_dir / RUN_FILE).read_text())["task"]["mcp_servers"]) == len(servers)
