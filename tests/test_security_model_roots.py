"""`autorl serve` takes a client's `base_model` from its model roots only (`--model-roots`): the embedded model,
autorl's model cache and the directories its operator names; any other path of the server, a link out of a
root included, is one 403 line that says nothing of the path, and holds no room and leaves no directory."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autorl.backends.remote.config import ServeConfig
from autorl.backends.remote.limits import ServeLimits
from pipelines.cli import app as cli
from tests.helpers.remote import Harness, call, register_body


@pytest.fixture
def elsewhere():
    """A model directory (a config.json) outside the test's temporary directories and model roots."""
    path = Path(tempfile.mkdtemp(prefix="autorl-elsewhere-"))
    (path / "config.json").write_text("{}")
    yield path
    shutil.rmtree(path)


def test_security_a_base_model_outside_the_model_roots_is_one_403_line(tmp_path, chat, tiny_model, elsewhere):
    link = tmp_path / "link-out"
    link.symlink_to(elsewhere)
    harness = Harness(tmp_path, chat, limits=ServeLimits(max_models_per_client=1))
    try:
        for index, base in enumerate(
            [str(elsewhere), str(link), "/etc", str(tiny_model) + "/../../../../etc", "~nosuchuser/m", "a\x00b", ""]
        ):
            body = register_body(tiny_model, name=f"out{index}", base_model=base)
            answer = call("POST", f"{harness.url}/models", content=json.dumps(body))
            assert answer.status_code == 403, (base, answer.text)
            line = answer.json()["error"]
            assert "is not the embedded model nor under this server's model roots" in line, line
            assert "--model-roots DIR" in line and "/" not in line.partition(" is not ")[2], line  # names no root
        assert call("POST", f"{harness.url}/models", content=json.dumps(register_body(tiny_model))).status_code == 200
        assert sorted(p.name for p in (tmp_path / "models").glob("*/*")) == ["agent"]
    finally:
        harness.stop()


def test_security_the_model_roots_are_the_embedded_model_the_cache_and_the_named_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORL_CACHE", str(tmp_path / "cache"))
    limits = ServeLimits()
    assert limits.check_base_model("embedded:smollm2-135m") is None
    assert limits.check_base_model(str(tmp_path / "cache" / "models" / "smollm2-135m")) is None
    assert limits.check_base_model(str(tmp_path / "mine" / "m")) is not None
    assert ServeLimits(model_roots=[tmp_path / "mine"]).check_base_model(str(tmp_path / "mine" / "m")) is None
    assert ServeLimits(model_roots=[tmp_path / "mine"]).check_base_model(str(tmp_path / "mine2")) is not None


def test_security_serve_takes_its_model_roots_from_the_command_line(tmp_path, monkeypatch):
    result = CliRunner().invoke(cli, ["serve", "--help"], terminal_width=200)
    assert "--model-roots" in result.output, result.output
    taken = {}
    monkeypatch.setattr("autorl.backends.remote.server.serve", lambda config, announce: taken.update(config=config))
    result = CliRunner().invoke(cli, ["serve", "--home", str(tmp_path), "--model-roots", "/srv/a,/srv/b"])
    assert result.exit_code == 0, result.output
    config: ServeConfig = taken["config"]
    assert config.limits.model_roots == [Path("/srv/a"), Path("/srv/b")]
