"""examples/compare_variants.py, an ART notebook as a script, runs as a user runs it (for one step per variant):
two variants trained and logged through the ART API on the embedded model, then ART's charts from the logs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.limits import scaled

pl = pytest.importorskip("polars", reason="the example's charts need the plotting extra (polars)")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "compare_variants.py"


@pytest.mark.slow
@pytest.mark.timeout(scaled(900))  # two vLLM starts, a step each and three validation batches: ~4 min on 2 cores
def test_the_example_trains_two_variants_and_draws_arts_charts_from_their_logs(tmp_path):
    from autorl.utils.benchmarking.load_trajectories import load_trajectories

    env = {**os.environ, "STEPS": "1", "ART_PATH": str(tmp_path / "art"), "OUT": str(tmp_path / "out"),
           "MPLBACKEND": "Agg"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(840)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "progress.png").stat().st_size > 0 and (tmp_path / "out" / "comparison.png").is_file()
    df = asyncio.run(load_trajectories("compare-variants", art_path=str(tmp_path / "art")))
    logged = df.group_by("model", "split").agg(pl.col("step").unique().sort()).sort("model", "split").rows()
    # a train batch is logged at the step it trains from (model.log's default step, as in ART)
    assert logged == [("lr-3e-4", "train", [0]), ("lr-3e-4", "val", [0, 1]), ("lr-3e-5", "train", [0]),
                      ("lr-3e-5", "val", [0, 1])]  # fmt: skip
    assert df.filter(pl.col("split") == "val").height == 4 * 8  # 4 kinds x 2 answers, at steps 0 and 1, each model
    for name in ("lr-3e-4", "lr-3e-5"):
        assert (tmp_path / "art" / "compare-variants" / "models" / name / "checkpoints" / "0001").is_dir()
