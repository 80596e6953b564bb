"""A run makes the model better: the learning benchmark's `one_word` task, a few steps, from the CLI.

The margin and the step count come from `python benchmarks/learning.py --tasks one_word --losses grpo
--seeds 0,1,2 --steps 8` (README, "What training buys"): every seed gained well above `MARGIN`.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import learning

pytestmark = pytest.mark.slow
STEPS = 8
MARGIN = 0.1
"""Held-out mean reward (0-1) the trained LoRA must gain over the base model."""


def test_a_short_run_raises_the_held_out_reward(tmp_path):
    run = learning.one_run("one_word", "grpo", seed=0, steps=STEPS, home=tmp_path, extra=[])
    assert run["base"]["inputs"] == run["trained"]["inputs"] == 16  # every validation input scored
    assert run["gain"] > MARGIN, run
