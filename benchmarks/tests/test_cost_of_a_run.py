"""`benchmarks/perf/cost_of_a_run.py`'s cost per point gained: a run's evaluate scores, base against the trained
LoRA, priced as `autorl benchmark` prices a variant."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cost_of_a_run
import pandas as pd

from pipelines.artifacts import ArtifactStore
from ruler.endpoint import import_litellm


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


def test_a_benchmark_s_spending_and_the_trained_lora_s_cost_per_point_priced_as_an_api_judge(tmp_path):
    """`--benchmark DIR`: the benchmark's own judge tokens at the API model's price and its seconds at the price
    per hour; the trained LoRA's training USD over its gain on the benchmark's scores."""
    spent = {
        "seconds": 36.0,
        "tokens": {"policy": {"prompt": 90, "completion": 10}, "judge": {"prompt": 1_000_000, "completion": 0}},
    }
    (tmp_path / "cost.json").write_text(json.dumps(spent))
    rows = [{"input": f"q{i}", "variant": "base", "reward": 0.2} for i in range(3)]
    rows += [{"input": f"q{i}", "variant": "r@latest", "reward": 0.7} for i in range(3)]
    pd.DataFrame(rows).to_csv(tmp_path / "scores.csv", index=False)
    priced = cost_of_a_run.benchmark_priced(tmp_path, "openai/gpt-4.1-mini", 100.0, train_usd=0.5)
    input_price = import_litellm().cost_per_token(
        model="openai/gpt-4.1-mini", prompt_tokens=1_000_000, completion_tokens=0
    )[0]
    assert priced["usd_priced_as"]["api"] == round(input_price, 6) > 0 and priced["usd_priced_as"]["compute"] == 1.0
    (row,) = priced["per_point_gained"]
    assert row["variant"] == "r@latest" and row["gain"] == 0.5 and math.isclose(row["usd_per_point"], 0.5 / 50)
