"""What a recorded run cost, per stage (its run.json), and what it would have cost with an API judge and a priced
machine: its judge tokens at LiteLLM's price table for `--judge-as`, its seconds at `--price-per-hour` (priced,
not called); and, at that price, what a point of held-out score gained over the base model cost (the evaluate
stage's per-input scores of its trained LoRA against the base, as `autorl benchmark` prices a variant: the
train stage's spending, and the whole run's). With `--benchmark DIR` (an `autorl benchmark` of the run's base
and `RUN@latest`, its output directory), the same for that benchmark: what it spent answering and judging
(its `cost.json`) priced the same way, and the trained LoRA's cost per point on the benchmark's scores.

    python benchmarks/perf/cost_of_a_run.py RUN [--home HOME] [--judge-as openai/gpt-4.1-mini] [--price-per-hour 0.1]
        [--benchmark DIR] [--out NAME]
    # writes benchmarks/perf/results/cost_of_a_run.json (--out names another file)

Not a speed measurement: no baseline and no ratio; the figures are the run's own records and LiteLLM's prices.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import pandas as pd
from _common import write_result

from pipelines.artifacts import ArtifactStore
from pipelines.benchmarking import gain_cost
from pipelines.benchmarking.scoreboard import SCORES, SPENT, per_input_scores
from pipelines.benchmarking.variants import Cost
from pipelines.config import DEFAULT_HOME
from pipelines.costs import cost_lines
from pipelines.records import evaluation
from pipelines.records.pricing import added, priced, token_price
from pipelines.runs import load_run


def per_point(home: Path, record: dict, usd: dict[str, float]) -> list[dict]:
    """USD per point gained by the trained LoRA over the base on the run's held-out inputs, with the gain's 95%
    CI, for each cost in `usd` (what it covers: USD); empty when the run has no evaluate stage."""
    key = record.get("keys", {}).get("evaluate")
    if key is None:
        return []
    frame = pd.read_parquet(ArtifactStore(home / "artifacts").path("evaluate", key) / evaluation.SCORES_FILE)
    rows = gain_cost.run_gain_costs(frame, usd).to_dict("records")
    return [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()} for row in rows]


def judge_as_api(cost: dict, judge_as: str, price_per_hour: float) -> dict[str, float]:
    """The USD of a cost record (`pipelines.records.pricing.priced`) with its judge tokens at `judge_as`'s LiteLLM price and
    its seconds at `price_per_hour`; its other tokens as recorded (the policy and the embedded generator run here)."""
    judge = cost["tokens"].get("judge", {"prompt": 0, "completion": 0})
    tokens = Counter({("judge", judge_as, side): count for side, count in judge.items()})
    return priced(cost["seconds"], tokens, price_per_hour)["usd"]


def benchmark_priced(directory: Path, judge_as: str, price_per_hour: float, train_usd: float) -> dict:
    """An `autorl benchmark` of a run's base and `RUN@latest` (its output `directory`): what it spent (its
    `cost.json`) and that priced as `judge_as_api`, and USD per point the trained LoRA (`train_usd`, its
    training) gained over the base on the benchmark's per-input scores, with the gain's 95% CI."""
    spent = json.loads((directory / SPENT).read_text())
    frame = pd.read_csv(directory / SCORES)
    trained = next(v for v in frame["variant"].unique() if v.endswith("@latest"))
    table = gain_cost.gain_costs(per_input_scores(frame, [gain_cost.BASE, trained]), {trained: Cost(usd=train_usd)})
    rows = [
        {k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()} for row in table.to_dict("records")
    ]
    return {"spent": spent, "usd_priced_as": judge_as_api(spent, judge_as, price_per_hour), "per_point_gained": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--judge-as", default="openai/gpt-4.1-mini")
    parser.add_argument("--price-per-hour", type=float, default=0.1, help="USD per hour of the machine")
    parser.add_argument("--benchmark", type=Path, help="an `autorl benchmark` output directory of this run")
    parser.add_argument("--out", default="cost_of_a_run", help="the results file's name, without .json")
    args = parser.parse_args()
    record = load_run(args.home, args.run)
    stages = {name: entry["cost"] for name, entry in record["stages"].items() if "cost" in entry}
    price = token_price(args.judge_as)
    as_api = {name: judge_as_api(cost, args.judge_as, args.price_per_hour) for name, cost in stages.items()}
    result = {
        "run": args.run,
        "status": record.get("status"),
        "price_per_hour": record["config"].get("price_per_hour"),
        "judge": record["config"].get("judge"),
        "steps": record["config"].get("steps"),
        "group_size": record["config"].get("group_size"),
        "stages": stages,
        "total": added(list(stages.values())),
        "priced_as": {
            "judge": args.judge_as,
            "usd_per_token": price,
            "price_per_hour": args.price_per_hour,
            "usd_per_stage": as_api,
            "usd": {key: round(sum(usd[key] for usd in as_api.values()), 6) for key in ("compute", "api", "total")},
        },
    }
    usd = result["priced_as"]["usd"]
    result["per_point_gained"] = per_point(
        args.home, record, {"train stage": as_api.get("train", {}).get("total", 0.0), "whole run": usd["total"]}
    )
    print("\n".join(cost_lines(stages, result["total"])))
    print(f"\npriced as {args.judge_as} (LiteLLM) and ${args.price_per_hour}/h: {usd}")
    for row in result["per_point_gained"]:
        print(
            f"{row['cost']}: ${row['cost_usd']:.4f}, gain {row['gain']:+.3f} [{row['gain_ci_low']:+.3f}, "
            f"{row['gain_ci_high']:+.3f}], USD per point {row['usd_per_point']:.5f} {row['usd_per_point_ci']}"
        )
    if args.benchmark is not None:
        train_usd = as_api.get("train", {}).get("total", 0.0)
        result["benchmark"] = benchmark_priced(args.benchmark, args.judge_as, args.price_per_hour, train_usd)
        bench = result["benchmark"]
        print(
            f"\nbenchmark {args.benchmark}: spent {bench['spent']['tokens']}, priced as above: {bench['usd_priced_as']}"
        )
        for row in bench["per_point_gained"]:
            print(
                f"{row['variant']}: gain {row['gain']:+.3f}, USD per point {row['usd_per_point']:.5f} {row['usd_per_point_ci']}"
            )
    print(write_result(args.out, result))


if __name__ == "__main__":
    main()
