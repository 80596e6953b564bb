"""`benchmarks/perf/cost_of_a_run.py`'s cost per point gained: a run's evaluate scores, base against the trained
LoRA, priced as `autorl benchmark` prices a variant."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "perf"))

import cost_of_a_run

from pipelines.artifacts import ArtifactStore


def scores(home: Path, key: str, base: list[float], trained: list[float]) -> None:
    path = ArtifactStore(home / "artifacts").path("evaluate", key)
    path.mkdir(parents=True)
    rows = [{"input": f"q{i}", "variant": "base", "reward": r, "answer": ""} for i, r in enumerate(base)]
    rows += [{"input": f"q{i}", "variant": "latest", "reward": r, "answer": ""} for i, r in enumerate(trained)]
    rows += [{"input": "q0", "variant": "best", "reward": 9.0, "answer": ""}]  # not the LoRA priced
    pd.DataFrame(rows).to_parquet(path / "scores.parquet")


def test_a_point_costs_the_usd_over_the_gain_in_points(tmp_path):
    scores(tmp_path, "k1", base=[0.0, 0.2, 0.4, 0.2], trained=[0.5, 0.7, 0.9, 0.7])
    rows = cost_of_a_run.per_point(tmp_path, {"keys": {"evaluate": "k1"}}, {"train stage": 0.01, "whole run": 0.05})
    assert [row["cost"] for row in rows] == ["train stage", "whole run"]
    assert rows[0]["gain"] == 0.5 and rows[0]["gain_ci_low"] == rows[0]["gain_ci_high"] == 0.5
    assert math.isclose(rows[0]["usd_per_point"], 0.01 / 50)
    assert math.isclose(rows[1]["usd_per_point"], 0.05 / 50)


def test_no_gain_has_no_cost_per_point_and_no_evaluate_stage_no_rows(tmp_path):
    scores(tmp_path, "k2", base=[0.5, 0.5], trained=[0.5, 0.4])
    (row,) = cost_of_a_run.per_point(tmp_path, {"keys": {"evaluate": "k2"}}, {"whole run": 0.05})
    assert row["gain"] < 0 and math.isnan(row["usd_per_point"])
    assert cost_of_a_run.per_point(tmp_path, {"keys": {}}, {"whole run": 0.05}) == []
