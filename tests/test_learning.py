"""A run makes the model better, from the CLI: the learning benchmark's form-only `one_word` task in a few steps,
and a content task (`arithmetic`: the sum checked) at the run defaults.

The margin and the settings come from `python benchmarks/perf/learning.py --tasks one_word --losses grpo
--seeds 0,1,2 --steps 6 --out learning_regression -- --max-tokens 32`
(benchmarks/perf/results/learning_regression.json): held-out gains +0.230, +0.216, +0.147 over seeds 0-2 (base
0.16-0.20), so `MARGIN` sits two thirds below the smallest.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "perf"))
import learning

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # about 270 s on 2 cores
RUN_TIMEOUT_S = 540
"""The run's own limit, inside the test's: a run that hangs ends with its output, not a pytest stack."""
STEPS = 6
EXTRA = ["--max-tokens", "32", "--preflight", "off"]
"""One-word answers need few tokens; the preflight checks (a minute of judging) are not what this test is for."""
MARGIN = 0.05
"""Held-out mean reward (0-1) the trained LoRA must gain over the base model."""


def test_a_short_run_raises_the_held_out_reward(tmp_path):
    run = learning.one_run("one_word", "grpo", 0, STEPS, tmp_path, EXTRA, timeout_s=RUN_TIMEOUT_S)
    assert run["base"]["inputs"] == run["trained"]["inputs"] == 16  # every validation input scored
    assert run["gain"] > MARGIN, run


CONTENT_STEPS = 20
CONTENT_MARGIN = 0.05
"""Held-out mean reward the trained LoRA must gain on `arithmetic` (the sum checked, partial credit when
close) at the run defaults: a third of the smallest gain content-checked tasks showed in 17-20 default steps
when issue 42 was filed (+0.1 to +0.17)."""


@pytest.mark.skipif(
    not os.environ.get("AUTORL_CONTENT_LEARNING_TEST"),
    reason="20 default steps do not fit CI's 45-minute suite on 2 cores and the margin is not measured yet; "
    "AUTORL_CONTENT_LEARNING_TEST=1 runs it",
)
@pytest.mark.timeout(3600)  # 20 default steps of 16 rollouts of up to 128 tokens, on 2 cores
def test_the_defaults_raise_the_held_out_score_of_a_content_task(tmp_path):
    run = learning.one_run("arithmetic", "grpo", 0, CONTENT_STEPS, tmp_path, [], timeout_s=3400)
    assert run["base"]["inputs"] == run["trained"]["inputs"] == 16
    assert run["gain"] > CONTENT_MARGIN, run
