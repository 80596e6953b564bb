"""What a recorded run cost, per stage (its run.json), and what it would have cost with an API judge and a priced
machine: its judge tokens at LiteLLM's price table for `--judge-as`, its seconds at `--price-per-hour` (priced,
not called).

    python benchmarks/perf/cost_of_a_run.py RUN [--home HOME] [--judge-as openai/gpt-4.1-mini] [--price-per-hour 0.1]
        [--out NAME]
    # writes benchmarks/perf/results/cost_of_a_run.json (--out names another file)

Not a speed measurement: no baseline and no ratio; the figures are the run's own records and LiteLLM's prices.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from _common import write_result

from pipelines.config import DEFAULT_HOME
from pipelines.costs import added, cost_lines, priced, token_price
from pipelines.runs import load_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--judge-as", default="openai/gpt-4.1-mini")
    parser.add_argument("--price-per-hour", type=float, default=0.1, help="USD per hour of the machine")
    parser.add_argument("--out", default="cost_of_a_run", help="the results file's name, without .json")
    args = parser.parse_args()
    record = load_run(args.home, args.run)
    stages = {name: entry["cost"] for name, entry in record["stages"].items() if "cost" in entry}
    price = token_price(args.judge_as)
    as_api = {}
    for name, cost in stages.items():  # the judge's tokens at the API model's price, the rest as recorded
        judge = cost["tokens"].get("judge", {"prompt": 0, "completion": 0})
        tokens = Counter({("judge", args.judge_as, side): count for side, count in judge.items()})
        as_api[name] = priced(cost["seconds"], tokens, args.price_per_hour)["usd"]
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
    print("\n".join(cost_lines(stages, result["total"])))
    usd = result["priced_as"]["usd"]
    print(f"\npriced as {args.judge_as} (LiteLLM) and ${args.price_per_hour}/h: {usd}")
    print(write_result(args.out, result))


if __name__ == "__main__":
    main()
