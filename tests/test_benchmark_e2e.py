"""End to end: a tiny real run on the embedded model, then `autorl benchmark` of its base model against
its latest checkpoint, judged by the run's (embedded) RULER judge on one vLLM server."""

import os
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.slow
TASK = "Reply to a customer asking for a refund, politely, in two sentences"


def test_benchmark_of_a_real_run_writes_the_tables_and_chart_and_reruns_from_cache(tmp_path):
    home, out = tmp_path / "home", tmp_path / "bench"
    env = {**os.environ, "AUTORL_HOME": str(home)}  # every cache, the judge's included, under this home

    def autorl(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "autorl.cli", *args], capture_output=True, text=True, timeout=1800, env=env
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout + result.stderr

    autorl(
        "run", TASK, "--steps", "1", "--group-size", "2", "--groups-per-step", "1", "--inputs", "5",
        "--max-tokens", "24", "--no-wandb", "--name", "r",
    )  # fmt: skip
    first = autorl("benchmark", "r", "--variants", "base,r@latest", "--out", str(out))
    results = pd.read_csv(out / "results.csv")
    assert list(results["variant"]) == ["base", "r@latest"] and not results["failed"].any(), first
    assert (results["n"] >= 1).all() and results["mean"].between(0, 1).all(), first
    assert {"results.md", "results.csv", "winrates.csv", "scores.csv", "scores.png"} <= {p.name for p in out.iterdir()}
    assert "| r@latest |" in (out / "results.md").read_text()
    assert (out / "scores.png").read_bytes()[:4] == b"\x89PNG"
    assert "model calls this run: 0" not in first

    again = autorl("benchmark", "r", "--variants", "base,r@latest", "--out", str(out))
    assert "model calls this run: 0" in again
    assert pd.read_csv(out / "results.csv").equals(results)
