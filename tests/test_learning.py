"""A run makes the model better: the learning benchmark's `one_word` task, a few steps, from the CLI.

The margin and the settings come from `python benchmarks/perf/learning.py --tasks one_word --losses grpo
--seeds 0,1,2 --steps 6 --out learning_regression -- --max-tokens 32`
(benchmarks/perf/results/learning_regression.json): held-out gains +0.230, +0.216, +0.147 over seeds 0-2 (base
0.16-0.20), so `MARGIN` sits two thirds below the smallest.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "perf"))
import learning

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # about 270 s on 2 cores
RUN_TIMEOUT_S = 540
"""The run's own limit, inside the test's: a run that hangs ends with its output, not a pytest stack."""
STEPS = 6
EXTRA = ["--max-tokens", "32"]  # one-word answers need few tokens; the test runs faster
MARGIN = 0.05
"""Held-out mean reward (0-1) the trained LoRA must gain over the base model."""


def test_a_short_run_raises_the_held_out_reward(tmp_path):
    run = learning.one_run("one_word", "grpo", 0, STEPS, tmp_path, EXTRA, timeout_s=RUN_TIMEOUT_S)
    assert run["base"]["inputs"] == run["trained"]["inputs"] == 16  # every validation input scored
    assert run["gain"] > MARGIN, run
