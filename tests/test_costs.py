"""Pricing a run (pipelines/records/pricing.py, pipelines/costs.py): tokens at LiteLLM's own price table (no call made), this machine's time at
--price-per-hour, sums per stage and run, the budget's threshold, and `autorl show`'s cost table."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.costs import BudgetReached, check_budget, cost_lines
from pipelines.records.pricing import Meter, added, priced, token_price
from ruler.calls import CallRecord
from ruler.endpoint import import_litellm

API_JUDGE = "openai/gpt-4o-mini"


def test_api_tokens_take_litellm_s_price_and_local_time_the_price_per_hour():
    litellm = import_litellm()
    expected = sum(litellm.cost_per_token(model=API_JUDGE, prompt_tokens=1000, completion_tokens=200))
    tokens = Counter({
        ("judge", API_JUDGE, "prompt"): 1000, ("judge", API_JUDGE, "completion"): 200,
        ("policy", "my-policy", "prompt"): 5000, ("policy", "my-policy", "completion"): 700,
        ("generator", "embedded", "completion"): 30, ("judge", "mine@http://127.0.0.1:9/v1", "prompt"): 40,
        ("generator", "embedded:smollm2-135m", "prompt"): 8,
    })  # fmt: skip
    cost = priced(7200.0, tokens, price_per_hour=1.5)
    assert expected > 0 and cost["usd"]["api"] == pytest.approx(expected, abs=1e-6)
    assert cost["usd"]["compute"] == 3.0 and cost["usd"]["total"] == pytest.approx(3.0 + expected, abs=1e-6)
    assert cost["tokens"]["policy"] == {"prompt": 5000, "completion": 700} and cost["tokens_total"] == 6978
    assert cost["unpriced"] == ["mine@http://127.0.0.1:9/v1"]  # the embedded model and the policy run here
    assert token_price("embedded") is None and token_price("no-such-model-anywhere") is None
    assert token_price("embedded:smollm2-135m") is None


def test_a_meter_reads_what_happened_between_two_points():
    meter, judge, generator = Meter(), [CallRecord(API_JUDGE, 1.0, 10, 5)], []
    meter.add("policy", "p", 100, 20)
    start = meter.reading(judge, generator)
    meter.add("policy", "p", 50, 10)
    judge.append(CallRecord(API_JUDGE, 2.0, 300, 40))
    generator.append(CallRecord("embedded", 2.0, 7, 3))
    cost = meter.since(start, judge, generator, price_per_hour=0.0)
    assert cost["tokens"] == {
        "generator": {"prompt": 7, "completion": 3},
        "judge": {"prompt": 300, "completion": 40},
        "policy": {"prompt": 50, "completion": 10},
    }
    assert cost["usd"]["compute"] == 0.0 and cost["usd"]["api"] > 0


def test_costs_add_up_and_a_budget_stops_at_the_first_record_that_reaches_it():
    step = priced(3600.0, Counter({("policy", "p", "prompt"): 400, ("policy", "p", "completion"): 100}), 0.5)
    two = added([step, step])
    assert (two["seconds"], two["tokens_total"], two["usd"]["total"]) == (7200.0, 1000, 1.0)
    check_budget(step, budget_usd=0.6, budget_tokens=None, where="step 1")  # 0.5 spent: goes on
    with pytest.raises(BudgetReached, match=r"^budget reached after step 2: spent \$1\.0000 of --budget-usd 1;"):
        check_budget(two, budget_usd=1.0, budget_tokens=None, where="step 2")
    with pytest.raises(BudgetReached, match="1000 tokens of --budget-tokens 900"):
        check_budget(two, budget_usd=None, budget_tokens=900, where="step 2")
    table = cost_lines({"train": two}, two)
    assert table[2] == "| train | 7200.0 | 1000 | 0 | 0 | 1.0000 | 0.0000 | 1.0000 |"


def test_show_prints_the_cost_per_stage_and_the_budget_stop(tmp_path):
    cost = priced(60.0, Counter({("policy", "p", "prompt"): 90, ("judge", API_JUDGE, "completion"): 10}), 3.6)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    entry = {"cached": False, "summary": {}, "seconds": 60.0, "model_calls": 4, "cost": cost}
    stopped = "budget reached after step 1: spent 100 tokens of --budget-tokens 50"
    record = {
        "name": "r1",
        "status": "budget",
        "stopped": stopped,
        "task": {"description": "t"},
        "keys": {"baseline": "k"},
    }
    (run / "run.json").write_text(json.dumps({**record, "stages": {"baseline": entry}, "cost": added([cost])}))
    shown = CliRunner().invoke(app, ["show", "r1", "--home", str(tmp_path)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    rows = [line for line in shown.output.splitlines() if "baseline" in line and "0.06" in line]
    assert rows and "90" in rows[0] and stopped in " ".join(shown.output.split())


def test_cost_per_point_gained_over_the_base_with_its_interval(tmp_path):
    import numpy as np
    import pandas as pd

    from pipelines.benchmarking.gain_cost import gain_costs, markdown
    from pipelines.benchmarking.variants import Cost
    from pipelines.stats import mean_ci

    scores = pd.DataFrame(
        {"base": [0.2, 0.4, 0.5, 0.1], "run@latest": [0.6, 0.5, 0.9, np.nan], "worse": [0.1, 0.3, 0.5, 0.1]},
        index=["a", "b", "c", "d"],
    )
    costs = {"run@latest": Cost(10, 60.0, "2 training steps", usd=0.5), "worse": Cost(usd=None)}
    table = gain_costs(scores, costs).set_index("variant")
    gain, low, high = mean_ci([0.4, 0.1, 0.4])  # the inputs both answered
    row = table.loc["run@latest"]
    assert (row["gain"], row["gain_ci_low"], row["gain_ci_high"]) == pytest.approx((gain, low, high))
    assert row["usd_per_point"] == pytest.approx(0.5 / (gain / 0.01)) and row["cost_usd"] == 0.5
    assert row["usd_per_point_ci"] == f"[{0.5 / (high / 0.01):.4f}, {0.5 / (low / 0.01):.4f}]"
    assert np.isnan(table.loc["worse", "usd_per_point"]) and table.loc["worse", "usd_per_point_ci"] == ""
    assert markdown(table.reset_index())[0] == "## Cost per point gained over the base model"
    assert gain_costs(scores.drop(columns="base"), costs).empty
