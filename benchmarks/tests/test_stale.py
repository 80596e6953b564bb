"""benchmarks/perf/stale.py: which benchmark results are older than the code they measure, on a real git repository."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.perf import stale
from benchmarks.perf.stale import MEASURES, Measures

ROOT = Path(__file__).resolve().parents[2]
MAP = {"x": Measures("benchmarks/perf/perf_x.py", ("autorl/serving/", "autorl/agents/rollout.py"))}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository with a benchmark script, measured code, unrelated code and a README."""
    for name, value in [("NAME", "t"), ("EMAIL", "t@example.invalid")]:
        monkeypatch.setenv(f"GIT_AUTHOR_{name}", value)
        monkeypatch.setenv(f"GIT_COMMITTER_{name}", value)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    git(tmp_path, "init", "-q", "-b", "main")
    write(tmp_path, "benchmarks/perf/perf_x.py", "print('measure')\n")
    write(tmp_path, "autorl/serving/server.py", "SPEED = 1\n")
    write(tmp_path, "autorl/agents/rollout.py", "TURNS = 1\n")
    write(tmp_path, "autorl/other.py", "OTHER = 1\n")
    write(tmp_path, "README.md", "# x\n")
    commit(tmp_path, "code", "2026-01-01T10:00:00+00:00")
    return tmp_path


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def write(root: Path, path: str, text: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)


def commit(root: Path, message: str, date: str) -> str:
    """Commit everything at `date` (author and committer), returning the sha."""
    git(root, "add", "-A")
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=root, check=True, env=env)
    return git(root, "rev-parse", "HEAD")


def result(root: Path, measured_at: str, commit_field: dict | None = None) -> None:
    record = {"ratios": [], "machine": {"cpu": "Test CPU", "cpu_flags": {"amx_bf16": True}}, "measured_at": measured_at}
    if commit_field is not None:
        record["commit"] = commit_field
    write(root, "benchmarks/perf/results/x.json", json.dumps(record))


def test_a_change_to_measured_code_makes_a_result_stale_and_an_unrelated_change_does_not(repo):
    result(repo, "2026-01-01T10:30:00+00:00")  # no `commit` field: the commit that committed it decides
    measured = commit(repo, "result", "2026-01-01T11:00:00+00:00")
    (fresh,) = stale.statuses(repo, MAP)
    assert (fresh.sha, fresh.basis, fresh.stale, fresh.cpu) == (measured, "git log", False, "Test CPU (AMX)")

    write(repo, "autorl/other.py", "OTHER = 2\n")
    write(repo, "README.md", "# x, edited\n")
    commit(repo, "unrelated", "2026-01-02T10:00:00+00:00")
    git(repo, "mv", "autorl/serving/server.py", "autorl/serving/main.py")  # a pure rename
    commit(repo, "rename", "2026-01-02T11:00:00+00:00")
    assert not stale.statuses(repo, MAP)[0].stale

    write(repo, "autorl/agents/rollout.py", "TURNS = 2\n")
    change = commit(repo, "more turns", "2026-01-03T10:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.stale, row.changed, row.since) == (True, ("autorl/agents/rollout.py",), change)


def test_a_recorded_commit_is_the_one_measured(repo):
    measured = git(repo, "rev-parse", "HEAD")
    write(repo, "autorl/serving/server.py", "SPEED = 2\n")
    commit(repo, "changed after the measurement", "2026-01-01T12:00:00+00:00")
    result(repo, "2026-01-01T11:00:00+00:00", {"sha": measured, "dirty": False})
    commit(repo, "result", "2026-01-01T13:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.sha, row.basis, row.changed) == (measured, "recorded", ("autorl/serving/server.py",))


def test_a_change_committed_between_measurement_and_result_counts(repo):
    """Without a recorded commit, code committed after `measured_at` but before the result was not measured."""
    write(repo, "autorl/agents/rollout.py", "TURNS = 2\n")
    between = commit(repo, "after the measurement", "2026-01-01T12:00:00+00:00")
    result(repo, "2026-01-01T11:00:00+00:00")
    commit(repo, "result", "2026-01-01T13:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.stale, row.changed, row.since) == (True, ("autorl/agents/rollout.py",), between)


def test_measured_dirty_takes_the_commit_that_committed_it(repo):
    """Measured on uncommitted changes: the code committed with the result is taken as measured."""
    sha = git(repo, "rev-parse", "HEAD")
    write(repo, "autorl/serving/server.py", "SPEED = 2\n")
    result(repo, "2026-01-01T11:00:00+00:00", {"sha": sha, "dirty": True})
    with_result = commit(repo, "the change and its measurement", "2026-01-01T12:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.sha, row.basis, row.stale) == (with_result, "git log, dirty", False)


def test_an_uncommitted_result_without_a_commit_is_unknown_and_stale(repo):
    result(repo, "2026-01-01T11:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.sha, row.stale) == (None, True)


def test_check_fails_only_when_the_readme_quotes_a_stale_result(repo, capsys):
    result(repo, "2026-01-01T10:30:00+00:00")
    commit(repo, "result", "2026-01-01T11:00:00+00:00")
    write(repo, "README.md", "Rollouts: 5 tok/s (`benchmarks/perf/results/x.json`).\n")
    commit(repo, "quoted", "2026-01-01T12:00:00+00:00")
    assert stale.main(["--check"], repo, MAP) == 0

    write(repo, "autorl/serving/server.py", "SPEED = 2\n")
    commit(repo, "faster", "2026-01-02T10:00:00+00:00")
    assert stale.main([], repo, MAP) == 0  # without --check: the table only
    assert stale.main(["--check"], repo, MAP) == 1
    assert "stale results quoted in README.md, examples/README.md or docs/: x" in capsys.readouterr().err

    write(repo, "README.md", "Rollouts: 5 tok/s (not re-measured\nsince abc; `benchmarks/perf/results/x.json`).\n")
    commit(repo, "marked", "2026-01-02T11:00:00+00:00")
    assert stale.main(["--check"], repo, MAP) == 1  # no wording exempts a quote any more

    write(repo, "README.md", 'Rollouts: <!--{{ result("x", "ratios") }}-->[]<!--/--> tok/s.\n')  # a drawn figure
    commit(repo, "drawn", "2026-01-02T11:30:00+00:00")
    assert stale.main(["--check"], repo, MAP) == 1

    write(repo, "README.md", "# x\n")
    write(repo, "docs/perf.md", '{{ source("x") }}: the build draws it and says it is stale.\n')
    commit(repo, "docs draw it", "2026-01-02T11:45:00+00:00")
    assert stale.main(["--check"], repo, MAP) == 0

    write(repo, "docs/perf.md", "Rollouts: 5 tok/s (`benchmarks/perf/results/x.json`).\n")  # typed in docs/
    commit(repo, "docs", "2026-01-02T12:00:00+00:00")
    assert stale.main(["--check"], repo, MAP) == 1


def test_a_change_to_a_result_s_notes_alone_is_not_a_measurement(repo):
    """A result without a recorded commit measured the commit that committed it; editing its `notes` later
    (the history of the measurement) does not make it the measurement of the code at that later commit."""
    result(repo, "2026-01-01T10:30:00+00:00")
    measured = commit(repo, "result", "2026-01-01T11:00:00+00:00")
    write(repo, "autorl/serving/server.py", "SPEED = 2\n")
    commit(repo, "faster", "2026-01-02T10:00:00+00:00")
    record = json.loads((repo / "benchmarks/perf/results/x.json").read_text())
    write(repo, "benchmarks/perf/results/x.json", json.dumps({**record, "notes": ["what was seen"]}))
    commit(repo, "notes", "2026-01-02T11:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.sha, row.stale) == (measured, True)

    write(
        repo,
        "benchmarks/perf/results/x.json",
        json.dumps({**record, "ratios": [1], "measured_at": "2026-01-02T11:30:00+00:00", "notes": ["again"]}),
    )
    again = commit(repo, "re-measured", "2026-01-02T12:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.sha, row.stale) == (again, False)


def test_every_result_and_every_script_that_writes_one_has_an_entry():
    perf = ROOT / "benchmarks" / "perf"
    assert {p.stem for p in (perf / "results").glob("*.json")} <= MEASURES.keys()
    writers = {
        f"benchmarks/perf/{p.name}"
        for p in perf.glob("*.py")
        if p.name != "_common.py" and (p.name.startswith("perf_") or re.search(r"\bwrite_result\(", p.read_text()))
    }
    assert writers <= {m.script for m in MEASURES.values()}
    missing = [path for m in MEASURES.values() for path in m.paths if not (ROOT / path).exists()]
    assert not missing, f"paths in stale.MEASURES that do not exist: {missing}"


def test_a_docstring_or_comment_change_leaves_a_result_fresh_and_a_code_change_does_not(repo):
    write(repo, "autorl/serving/server.py", '"""The server."""\n\nSPEED = 1\n"""How fast (1.3x, measured at abc)."""\n')
    measured = commit(repo, "documented", "2026-01-01T11:00:00+00:00")
    result(repo, "2026-01-01T11:30:00+00:00", {"sha": measured, "dirty": False})
    commit(repo, "result", "2026-01-01T12:00:00+00:00")
    write(
        repo,
        "autorl/serving/server.py",
        '"""The server, fresh figures."""\n\n# a comment\nSPEED = 1\n"""How fast (1.4x)."""\n',
    )
    commit(repo, "figures brought up to date", "2026-01-02T10:00:00+00:00")
    assert not stale.statuses(repo, MAP)[0].stale

    write(repo, "autorl/serving/server.py", '"""The server, fresh figures."""\n\nSPEED = 2\n"""How fast (1.4x)."""\n')
    change = commit(repo, "faster", "2026-01-03T10:00:00+00:00")
    (row,) = stale.statuses(repo, MAP)
    assert (row.stale, row.changed, row.since) == (True, ("autorl/serving/server.py",), change)


def test_same_code_reads_the_program_not_its_text():
    assert stale.same_code("def f():\n    'doc'\n    return 1\n", "def f():  # why\n    return (1)\n")
    assert not stale.same_code("def f():\n    return 1\n", "def f():\n    return 2\n")
    assert not stale.same_code("x = 'a string value'\n", "x = 'another value'\n")  # a value, not a docstring
    assert not stale.same_code("x = 1\n", "x = (\n")  # does not parse: not the same


def test_no_page_of_the_docs_types_a_result_the_build_does_not_draw():
    """docs/ pages name results through the build's macros (docs/hooks.py), which show each one's freshness:
    a `results/NAME.json` typed there is a figure nobody checks. (README.md's figures are drawn too, and checked
    against their files by tests/test_docs.py; whether they are fresh is `stale.py --check`'s to say.)"""
    names = [path.stem for path in (ROOT / "benchmarks" / "perf" / "results").glob("*.json")]
    pages = {page.name: page.read_text() for page in (ROOT / "docs").glob("*.md")}
    typed = {name: sorted(stale.quoted(text, names)) for name, text in pages.items() if stale.quoted(text, names)}
    assert not typed, f"docs pages that type result names instead of {{{{ source(...) }}}}: {typed}"


def test_a_family_of_results_named_by_a_pattern_is_quoted_by_each_of_its_files():
    names = [
        "learning_content_capitals_s0",
        "learning_content_extract_json_s2",  # a placeholder stands for a name with underscores too
        "learning_ablation_capitals_gs4_s0",
        "x",
    ]
    text = (
        "Each run (`results/learning_content_TASK_sSEED.json`)...\n\nAblations (`results/learning_ablation_capitals_*`)."
        "\n\nA folder: `results/` and `results/x` alone are no quote."
    )
    assert stale.quoted(text, names) == set(names) - {"x"}
    assert stale.quoted("Not re-measured since abc: `results/learning_content_TASK_sSEED.json`.", names) == {
        "learning_content_capitals_s0",
        "learning_content_extract_json_s2",
    }  # no wording exempts a quote
