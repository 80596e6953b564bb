"""The scaling benchmark's bookkeeping (`benchmarks/perf/scaling.py`): rotated order, flatness, the plot.

The measurements themselves need vLLM and minutes; these are the parts that decide what its figures say.
"""

from __future__ import annotations

import scaling


def test_rotations_give_every_value_each_turn_and_no_value_always_first():
    order = scaling.rotations((4, 8, 16), 3)
    assert order == [4, 8, 16, 8, 16, 4, 16, 4, 8]
    firsts = {order[i] for i in range(0, len(order), 3)}
    assert firsts == {4, 8, 16}


def test_flatness_compares_the_last_five_steps_with_steps_five_to_nine():
    steps = [{"total_s": 10.0} for _ in range(13)]
    assert scaling.flatness(steps, "total_s") is None  # too few steps to have both windows apart
    growing = [{"total_s": 10.0 + (2.0 if i >= 15 else 0.0)} for i in range(20)]
    figures = scaling.flatness(growing, "total_s")
    assert figures == {"steps_5_9": 10.0, "last_5": 12.0, "ratio": 1.2, "flat": False}
    steady = [{"total_s": 10.0 + (0.5 if i >= 15 else 0.0)} for i in range(20)]
    assert scaling.flatness(steady, "total_s")["flat"] is True


def test_the_plot_draws_every_part_it_is_given(tmp_path):
    def figure(median: float) -> dict:
        return {"median": median, "min": median - 1, "max": median + 1, "samples": [median]}

    steps = [{"step": i, "total_s": 8.0, "trainer_rss_mib": 900.0, "server_rss_mib": 1500.0} for i in range(1, 15)]
    result = {
        "steps": {"per_step": steps},
        "group_size": {str(g): {"total_s": figure(g)} for g in scaling.GROUP_SIZES},
        "concurrency": {str(c): figure(100.0 + c) for c in scaling.CONCURRENCY},
        "judge": {"4": {"seconds": figure(16.0)}, "8": {"seconds": figure(40.0)}, "16": {"refused": "too long"}},
    }  # no `length`: its panel stays empty
    path = tmp_path / "scaling.png"
    scaling.plot(result, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_judge_group_too_large_for_the_context_is_printed_as_such(capsys):
    part = {"4": {"seconds": {"median": 16.0, "min": 15.0, "max": 17.0}}, "16": {"refused": "too long"}}
    scaling.print_part("judge", part, "seconds", "s/request")
    assert capsys.readouterr().out == (
        "judge (s/request, median [min, max]): 4: 16.0 [15.0, 17.0], 16: does not fit the judge's context\n"
    )
