"""What tests of the `autorl` command share: its error line, and `autorl run` up to the pipeline (the `run`
fixture, registered in conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

import pipelines.staged_run
from autorl.task import TaskSpec
from pipelines.cli import app
from pipelines.config import RunConfig

TASK = "Reply to a customer asking for a refund, politely, in two sentences"


def error_line(result: Any) -> str:
    """A CLI result's single error line (a `typer.testing` result); it must be the last thing printed."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and result.output.rstrip().endswith(errors[0]), result.output
    return errors[0]


@pytest.fixture
def run(monkeypatch, tmp_path):
    """`autorl run ARGS` up to the pipeline, which only records the task and config it was given."""
    seen = {}

    async def record(task, config, console=None):
        seen.update(task=task, config=config)

    monkeypatch.setattr(pipelines.staged_run, "run_stages", record)
    monkeypatch.delenv("AUTORL_HOME", raising=False)

    def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[TaskSpec, RunConfig]:
        result = CliRunner().invoke(app, ["run", *args], env=env)
        assert result.exit_code == 0, result.output
        return seen["task"], seen["config"]

    return invoke


def run_error_line(*args: str) -> str:
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len([line for line in lines if line.startswith("error: ")]) == 1, result.output
    return lines[-1]
