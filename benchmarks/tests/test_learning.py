"""A run makes the model better at what its task asks, from the task text alone, from the CLI: `capitals_text`
(examples/capitals_text.toml: examples/capitals.toml without its hand-written system prompt and worked example;
the judge checks the city the answer names) at the run defaults, 10 steps, 4 answers to each held-out input.

The gain is tested input by input: each held-out input's mean score under the trained LoRA against the base
model's on the same input, by the one-sided paired sign-flip test (`pipelines.stats.sign_flip_p`) at `ALPHA`. A
model that did not change has differences symmetric around 0, so it passes at most `ALPHA` of the time, however
noisy the sampling. The power comes from `python benchmarks/perf/learning.py --tasks capitals_text --seeds 0,1,2
--steps 10 --out learning_regression_capitals_text10 -- --preflight off --eval-samples 4`
(benchmarks/perf/results/learning_regression_capitals_text10.json): p 0.0004, 0.0009 and 0.0004 at seeds 0-2,
each far below `ALPHA`; at 6 steps and 2 answers an input (learning_regression_capitals_text.json) it was 0.001,
0.40 and 0.014, too weak a run for this test.
"""

import learning
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1620)]
# 135-182 s a run on 2 cores with native bf16 (learning_regression_capitals_text10.json); the 6-step run it
# replaces took 708 s on an AVX2-only EPYC, where the trainer and the server run in float32
RUN_TIMEOUT_S = 1560
"""The run's own limit, inside the test's: a run that hangs ends with its output, not a pytest stack."""
STEPS = 10
EXTRA = ["--preflight", "off", "--eval-samples", "4"]
"""No preflight checks (the judge's audit and the learnability groups are not what this test is for); four answers
to each held-out input, so that each input's mean is steadier."""
ALPHA = 0.01
"""The most often a model that did not change may pass."""


def test_a_run_from_the_task_text_raises_the_held_out_score_input_by_input(tmp_path):
    run = learning.one_run("capitals_text", "grpo", 0, STEPS, tmp_path, EXTRA, timeout_s=RUN_TIMEOUT_S)
    assert run["base"]["inputs"] == run["trained"]["inputs"] == 16  # every validation input scored
    assert run["paired"]["gain"] > 0 and run["paired"]["p"] < ALPHA, run
