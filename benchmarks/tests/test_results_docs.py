"""The docs' results drawn from their files (docs/hooks.py), the answer counts they are computed from
(learning.py), and the re-measure command's plan (remeasure.py --list)."""

import json
import sys

import learning
import pytest
import remeasure

from benchmarks.perf import stale

ROOT = stale.ROOT


@pytest.fixture
def hooks(tmp_path, monkeypatch):
    """docs/hooks.py over a results folder of its own, every result fresh but `old`."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    monkeypatch.setattr(hooks, "_FRESHNESS", {})
    monkeypatch.setattr(
        hooks,
        "freshness",
        lambda name: hooks.Freshness(name != "old", "abc1234", "2026-12-06", "Test CPU", "" if name != "old" else "x"),
    )
    return hooks


def learning_result(path, task="capitals_text", answers=None):
    run = {
        "task": task, "loss": "grpo", "seed": 0, "steps": 20, "rl_steps": 20,
        "base": {"mean": 0.2844, "ci_low": 0.1375, "ci_high": 0.4437, "inputs": 16},
        "trained": {"mean": 0.7812, "ci_low": 0.593, "ci_high": 0.9383, "inputs": 16},
        "gain": 0.4969, "paired": {"gain": 0.4969, "ci": [0.2967, 0.7063], "p": 0.00037},
    }  # fmt: skip
    if answers is not None:
        run["answers"] = answers
    path.write_text(json.dumps({"runs": [run], "commit": {"sha": "abc1234" * 5, "dirty": False}}))


def test_a_figure_is_drawn_from_its_file_and_a_stale_one_says_so(hooks, tmp_path):
    learning_result(tmp_path / "fresh.json")
    learning_result(tmp_path / "old.json")
    page = hooks.render('From {{ ci("fresh", "base", ".2f") }} to {{ result("old", "trained.mean", ".2f") }}.')
    assert page.startswith('From 0.28 [0.14, 0.44] to 0.78<sup title="results/old.json is stale: x">stale</sup>.')
    assert "## Results this page draws on" in page
    assert "| `results/fresh.json` | abc1234 | Test CPU | 2026-12-06 | fresh |" in page
    assert "| `results/old.json` | abc1234 | Test CPU | 2026-12-06 | stale (x) |" in page
    with pytest.raises(KeyError):
        hooks.render('{{ result("missing", "trained.mean") }}')  # a wrong name fails the (strict) build


def test_answer_counts_are_computed_from_every_answer(hooks, tmp_path):
    rows = [{"variant": "latest", "answer": "The capital of Greece is Athens.", "reward": 1.0}] * 27
    rows += [{"variant": "latest", "answer": "Lima.", "reward": 0.0}] * 5
    rows += [{"variant": "base", "answer": "Greece is a country.", "reward": 0.0}] * 30
    rows += [{"variant": "base", "answer": "Athens", "reward": 1.0}] * 2
    counts = learning.counted(rows)
    assert counts["latest"][0] == {"answer": "The capital of Greece is Athens.", "reward": 1.0, "count": 27}
    learning_result(tmp_path / "counted.json", answers=counts)
    learning_result(tmp_path / "uncounted.json")
    assert hooks.render('{{ answers("counted") }}').startswith("27 of 32")
    assert hooks.render('{{ answers("counted", "base") }}').startswith("2 of 32")
    with pytest.raises(ValueError, match="keeps no answer counts"):
        hooks.render('{{ answers("uncounted") }}')
    table = hooks.render('{{ learning_table("*counted") }}')
    assert "| 2 of 32 -> 27 of 32 | `counted` |" in table and "| not kept | `uncounted` |" in table


def test_the_performance_and_fault_tables_draw_every_row(hooks, tmp_path):
    ratio = {"name": "GRPO step vs TRL", "ours": 5.5, "baseline": 12.0, "unit": "s", "ratio": 2.18, "goal": 2.0,
             "goal_met": True}  # fmt: skip
    (tmp_path / "grpo_step.json").write_text(json.dumps({"ratios": [ratio]}))
    (tmp_path / "faults.json").write_text(json.dumps({"scenarios": [
        {"scenario": "sigkill", "trials": 20, "outcome": "20/20 resumed", "data_lost": 0, "servers_left": 0,
         "recover_s": {"median": 90.1, "min": 6.2, "max": 142.1}}]}))  # fmt: skip
    assert "| GRPO step vs TRL | 5.5 s | 12 s | 2.18x | >= 2x (met) | `grpo_step` |" in hooks.render(
        "{{ performance_table() }}"
    )
    assert "| sigkill | 20 | 20/20 resumed | 0 | 0 | 90 s [6, 142] | fresh |" in hooks.render("{{ faults_table() }}")


def test_a_readme_figure_is_checked_and_rewritten_from_its_file(hooks, tmp_path):
    learning_result(tmp_path / "old.json")
    text = 'From <!--{{ result("old", "base.mean", ".2f") }}-->0.31<!--/--> on.'
    assert hooks.readme_figures(text) == [("0.31", "0.28")]  # no stale mark: README's test checks the value
    assert hooks.refresh(text) == 'From <!--{{ result("old", "base.mean", ".2f") }}-->0.28<!--/--> on.'


def test_every_page_of_the_docs_renders_from_the_results_files(hooks, monkeypatch):
    """What the build does to each page, without mkdocs: every macro names a result file that exists and a
    figure it holds (the strict build, tests/test_docs.py, fails on the same; freshness, git's, is the build's)."""
    monkeypatch.setattr(hooks, "RESULTS", stale.ROOT / "benchmarks" / "perf" / "results")
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert "{{" not in hooks.render(page.read_text())


def test_remeasure_lists_every_result_the_docs_draw_on_with_its_command_and_time(capsys):
    assert remeasure.main(["--list", "--only", "learning_text_capitals_s*,grpo_step"]) == 0
    out = capsys.readouterr().out
    assert "learning_text_capitals_s0" in out and "--out learning_text_capitals_s0" in out
    assert "perf_grpo_step.py --steps 5 --rounds 2 --no-adapter" in out and "4 parts, about" in out
    drawn = remeasure.drawn_on()
    assert {"learning_text_capitals_s0", "faults", "grpo_step", "learning_strict20_capitals_s1"} <= set(drawn)
    part = remeasure.part("learning_text_capitals_s0")
    argv = part.argv(ROOT / "w")
    assert argv[argv.index("--home") + 1] == str(ROOT / "w" / "learning_text_capitals_s0")  # never the recorded home
    with pytest.raises(SystemExit, match="no result matches"):
        remeasure.main(["--list", "--only", "no_such_result"])
