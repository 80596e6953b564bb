"""MkDocs hooks: the CLI reference written from the commands' `--help` at build time, the code map from the
modules' docstrings, and every measured figure a page shows drawn from `benchmarks/perf/results/` (the
benchmarks write them there), each with whether it is still fresh.

A page writes a figure as a macro, `{{ result("learning_text_capitals_s0", "trained.mean") }}`, and a table
as one, `{{ learning_table("learning_strict20_*") }}`: `MACROS` lists them. The build expands them from the
results files and ends the page with the results it drew on, each marked fresh or stale by
`benchmarks/perf/stale.py`'s rule (a stale figure is marked where it stands, too). README.md and
examples/README.md are not built: a figure there is the macro in an HTML comment followed by its text,
`<!--{{ result("NAME", "base.mean", ".2f") }}-->0.28<!--/-->`; `python docs/hooks.py README.md
examples/README.md` writes the texts from the files and tests/test_docs.py checks they match."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "benchmarks" / "perf" / "results"
RESULTS = FIGURES


def cli_reference() -> str:
    """Every `autorl` command's `--help`, in process (no network, no server), as one Markdown page."""
    os.environ.setdefault("AUTORL_HOME", str(ROOT / ".autorl"))
    from typer.main import get_command
    from typer.testing import CliRunner

    from pipelines.cli import app

    runner = CliRunner()
    env = {"COLUMNS": "110", "NO_COLOR": "1", "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
    parts = [
        "# CLI reference\n\n",
        "Written at build time from `autorl --help` and each command's `--help` (`docs/hooks.py`).\n",
    ]
    for command in [None, *get_command(app).commands]:
        args = ["--help"] if command is None else [command, "--help"]
        result = runner.invoke(app, args, env=env, prog_name="autorl")
        if result.exit_code != 0:
            raise RuntimeError(f"autorl {' '.join(args)} failed: {result.output}")
        title = "autorl" if command is None else f"autorl {command}"
        parts.append(f"\n## `{title}`\n\n```text\n{result.output.rstrip()}\n```\n")
    return "".join(parts)


MAPPED = ("autorl", "ruler", "pipelines")
"""The packages the code map shows, in the order imports point (the application's `pipelines` last)."""


def _opening(path: Path) -> str:
    """The first paragraph of the module docstring at `path`, on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(docstring.split("\n\n")[0].split())


def code_map(root: Path = ROOT) -> str:
    """Every package of `MAPPED` and each of its modules with the first paragraph of its docstring, as one
    Markdown page: the file-by-file map of where things live, read from the code so it cannot drift from it."""
    parts = [
        "# Code map\n\n",
        "Every package and module of autorl, written at build time from their docstrings (`docs/hooks.py`); "
        "CONTRIBUTING.md says how the floors fit together.\n",
    ]
    for name in MAPPED:
        for init in sorted((root / name).rglob("__init__.py")):
            package = init.parent
            parts.append(f"\n## `{package.relative_to(root)}/`\n\n{_opening(init)}\n\n")
            for module in sorted(package.glob("*.py")):
                if module.name != "__init__.py":
                    parts.append(f"- `{module.name}`: {_opening(module)}\n")
    return "".join(parts)


# --- measured results, drawn from their files ---------------------------------------------------------------


def record(name: str) -> dict:
    """The result `benchmarks/perf/results/NAME.json` (a KeyError names a result that has no file)."""
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise KeyError(f"no result file results/{name}.json")
    return json.loads(path.read_text())


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted `path` (`trained.mean`, `ratios.0.ratio`, `scenarios.sigkill.passed`): a number
    indexes a list, a name a dict's key or, in a list of dicts, the one whose `scenario`, `name` or `task` it
    is; a learning result's one run stands for the result (`trained.mean` is `runs.0.trained.mean`)."""
    value = data
    for part in path.split("."):
        if isinstance(value, list) and part.lstrip("-").isdigit():
            value = value[int(part)]
        elif isinstance(value, list):
            value = next(v for v in value if part in (v.get("scenario"), v.get("name"), v.get("task")))
        elif isinstance(value, dict) and part not in value and len(value.get("runs") or ()) == 1:
            value = value["runs"][0][part]
        else:
            value = value[part]
    return value


def formatted(value: Any, fmt: str = "") -> str:
    """`value` as a page shows it: `fmt` a format spec (`.3f`, `+.3f`, `.0%`), or 3 decimals for a float."""
    if fmt:
        return format(value, fmt)
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def answer_counts(run: dict, variant: str, at_least: float = 1.0) -> tuple[int, int] | None:
    """How many of a run's held-out answers of `variant` (base, latest) scored at least `at_least`, of how
    many: from the result's `answers` (every answer, counted); None where the result kept only a few."""
    answers = (run.get("answers") or {}).get(variant)
    if not answers:
        return None
    return sum(a["count"] for a in answers if a["reward"] >= at_least), sum(a["count"] for a in answers)


@dataclass
class Freshness:
    """Whether a result measured the code as it is now (`benchmarks/perf/stale.py`'s rule)."""

    fresh: bool
    commit: str
    date: str
    machine: str
    why: str = ""

    @property
    def label(self) -> str:
        return "fresh" if self.fresh else f"stale{f' ({self.why})' if self.why else ''}"


_FRESHNESS: dict[str, Freshness] = {}


def freshness(name: str) -> Freshness:
    """`name`'s `Freshness`, computed once a build (git, a fraction of a second each)."""
    if name not in _FRESHNESS:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from benchmarks.perf import stale

        row = stale.status(ROOT, name, stale.MEASURES[name], RESULTS)
        if row.sha is None:
            why = row.basis
        elif row.changed:
            more = f" and {len(row.changed) - 1} more" if len(row.changed) > 1 else ""
            why = f"{row.changed[0]}{more} changed since, first at {row.since[:7] if row.since else '?'}"
        else:
            why = ""
        _FRESHNESS[name] = Freshness(not row.stale, row.sha[:7] if row.sha else "unknown", row.date, row.cpu, why)
    return _FRESHNESS[name]


@dataclass
class Drawn:
    """The macros of one page: what they render, and the results they drew on (listed at the page's end)."""

    marked: bool = True
    """Mark a stale figure where it stands (a built page); README's figures are bare (their test checks them)."""
    used: list[str] = field(default_factory=list)

    def _use(self, name: str) -> None:
        if name not in self.used:
            self.used.append(name)

    def _mark(self, name: str, text: str) -> str:
        self._use(name)
        if not self.marked or freshness(name).fresh:
            return text
        return f'{text}<sup title="results/{name}.json is stale: {freshness(name).why}">stale</sup>'

    def result(self, name: str, path: str, fmt: str = "") -> str:
        """One figure of a result: `{{ result("NAME", "trained.mean", ".2f") }}`."""
        return self._mark(name, formatted(lookup(record(name), path), fmt))

    def span(self, pattern: str, path: str, fmt: str = "") -> str:
        """The range of one figure over a family of results: `{{ span("learning_text_capitals_s*",
        "trained.mean", ".2f") }}` -> `0.78-0.83`."""
        names = matching((pattern,))
        if not names:
            raise KeyError(f"no result file matches results/{pattern}")
        values = sorted(lookup(record(name), path) for name in names)
        low, high = formatted(values[0], fmt), formatted(values[-1], fmt)
        text = low if low == high else f"{low}-{high}"
        for name in names:
            self._use(name)
        if self.marked and not all(freshness(name).fresh for name in names):
            text += f'<sup title="a result of results/{pattern}.json is stale">stale</sup>'
        return text

    def ci(self, name: str, variant: str = "trained", fmt: str = ".3f") -> str:
        """A held-out mean with its 95% CI: `{{ ci("NAME", "base") }}` -> `0.284 [0.138, 0.444]`."""
        figure = lookup(record(name), variant)
        text = f"{figure['mean']:{fmt}} [{figure['ci_low']:{fmt}}, {figure['ci_high']:{fmt}}]"
        return self._mark(name, text)

    def answers(self, name: str, variant: str = "latest", at_least: float = 1.0) -> str:
        """`N of M` held-out answers of `variant` scoring at least `at_least`, counted from the result."""
        counts = answer_counts(lookup(record(name), "runs.0"), variant, at_least)
        if counts is None:
            raise ValueError(f"results/{name}.json keeps no answer counts (re-measure it: learning.py counts them)")
        return self._mark(name, f"{counts[0]} of {counts[1]}")

    def source(self, name: str) -> str:
        """A result named in the text, with the commit it measured and whether that is still the code; a shell
        pattern (`learning_ablation_capitals_*`) names a family, with how many of it are fresh."""
        if not any(c in name for c in "*?["):
            self._use(name)
            state = freshness(name)
            return f"`results/{name}.json` (at {state.commit}, {state.date}: {state.label})"
        names = matching((name,))
        if not names:
            raise KeyError(f"no result file matches results/{name}")
        for each in names:
            self._use(each)
        fresh = sum(freshness(each).fresh for each in names)
        return f"`results/{name}` ({len(names)} results, {fresh} fresh)"

    def learning_table(self, *patterns: str) -> str:
        """Every run of the learning results whose names match `patterns` (shell patterns), one row each."""
        names = matching(patterns)
        header = ("task", "judge", "seed", "steps", "base [95% CI]", "trained [95% CI]", "paired p",
                  "answers at 1.0, base -> trained", "result", "commit", "machine", "date", "fresh")  # fmt: skip
        rows = []
        for name in names:
            self._use(name)
            state = freshness(name)
            for run in record(name).get("runs", []):
                counts = [answer_counts(run, v) for v in ("base", "latest")]
                paired = run.get("paired") or {}
                rows.append((
                    run["task"], f"`judges:{run['task']}`", str(run["seed"]), str(run.get("rl_steps", run["steps"])),
                    _ci(run["base"]), _ci(run["trained"]), _p(paired.get("p")),
                    " -> ".join(f"{c[0]} of {c[1]}" for c in counts) if all(counts) else "not kept",
                    f"`{name}`", state.commit, state.machine, state.date, state.label,
                ))  # fmt: skip
        return _table(header, rows, f"no learning result matches {patterns}")

    def performance_table(self, *patterns: str) -> str:
        """Every ratio of the results matching `patterns` (all with `ratios` when none): ours against the
        baseline measured in the same invocation."""
        names = [n for n in matching(patterns or ("*",)) if record(n).get("ratios")]
        header = ("measured", "ours", "baseline", "ratio (>1: ours wins)", "goal", "result", "commit", "machine",
                  "date", "fresh")  # fmt: skip
        rows = []
        for name in names:
            self._use(name)
            state = freshness(name)
            for ratio in record(name)["ratios"]:
                goal = ratio.get("goal")
                rows.append((
                    ratio["name"], f"{ratio['ours']:g} {ratio['unit']}", f"{ratio['baseline']:g} {ratio['unit']}",
                    f"{ratio['ratio']:.2f}x", "-" if goal is None else f">= {goal:g}x ({'met' if ratio.get('goal_met') else 'not met'})",
                    f"`{name}`", state.commit, state.machine, state.date, state.label,
                ))  # fmt: skip
        return _table(header, rows, f"no result with ratios matches {patterns}")

    def faults_table(self, name: str = "faults") -> str:
        """The fault table (`benchmarks/perf/faults.py`): one row per scenario."""
        self._use(name)
        state = freshness(name)
        header = ("scenario", "trials", "outcome", "data lost", "servers left", "time to recover (median [min, max])",
                  "fresh")  # fmt: skip
        rows = []
        for row in record(name)["scenarios"]:
            recover = row.get("recover_s")
            rows.append((
                row["scenario"], str(row.get("trials", "-")), row.get("outcome", "-"), str(row.get("data_lost", "-")),
                str(row.get("servers_left", "-")),
                "-" if not recover else f"{recover['median']:.0f} s [{recover['min']:.0f}, {recover['max']:.0f}]",
                state.label,
            ))  # fmt: skip
        return _table(header, rows, "no scenario")

    def sources(self) -> str:
        """The results the page drew on: the commit each measured, its machine and date, fresh or stale."""
        rows = []
        for name in self.used:
            state = freshness(name)
            rows.append((f"`results/{name}.json`", state.commit, state.machine, state.date, state.label))
        header = ("result", "measured commit", "machine", "date", "fresh")
        return (
            "\n\n## Results this page draws on\n\n"
            + (
                "Written at build time from `benchmarks/perf/results/` (`docs/hooks.py`); fresh: no file of the code a "
                "result measures (`benchmarks/perf/stale.py`) changed since its commit. "
                "`python benchmarks/perf/remeasure.py --only NAME` re-measures one.\n\n"
            )
            + _table(header, rows, "")
        )


MACROS = ("result", "span", "ci", "answers", "source", "learning_table", "performance_table", "faults_table")
"""The macros a page may write between `{{` and `}}`."""
MACRO = re.compile(r"\{\{\s*(.+?)\s*\}\}", re.DOTALL)
FIGURE = re.compile(r"<!--\{\{\s*(.+?)\s*\}\}-->(.*?)<!--/-->", re.DOTALL)
"""A figure in a page the build does not render (README.md): the macro, then the text it wrote."""


def matching(patterns: tuple[str, ...]) -> list[str]:
    names = sorted(p.stem for p in RESULTS.glob("*.json"))
    return [n for n in names if any(fnmatch.fnmatchcase(n, pattern) for pattern in patterns)]


def expand(call: str, drawn: Drawn) -> str:
    """One macro call, evaluated with only the macros in scope."""
    scope = {name: getattr(drawn, name) for name in MACROS}
    return str(eval(call, {"__builtins__": {}}, scope))  # a page of this repository, not input


def render(markdown: str, drawn: Drawn | None = None) -> str:
    """A page with its macros expanded and, when it drew on results, the list of them at its end."""
    drawn = drawn or Drawn()
    text = MACRO.sub(lambda match: expand(match.group(1), drawn), markdown)
    return text + drawn.sources() if drawn.used else text


def readme_figures(text: str) -> list[tuple[str, str]]:
    """Each figure of a page the build does not render (`FIGURE`): (the text written, what its file says)."""
    drawn = Drawn(marked=False)
    return [(typed, expand(call, drawn)) for call, typed in FIGURE.findall(text)]


def refresh(text: str) -> str:
    """`text` with each figure (`FIGURE`) written again from its results file."""
    drawn = Drawn(marked=False)
    return FIGURE.sub(lambda m: f"<!--{{{{ {m.group(1)} }}}}-->{expand(m.group(1), drawn)}<!--/-->", text)


def _ci(figure: dict) -> str:
    return f"{figure['mean']:.3f} [{figure['ci_low']:.3f}, {figure['ci_high']:.3f}]"


def _p(p: float | None) -> str:
    return "-" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], empty: str) -> str:
    if not rows and empty:
        raise ValueError(empty)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: MkDocsConfig, files: Files) -> str:
    return render(markdown)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    files.append(File.generated(config, "code-map.md", content=code_map()))
    for figure in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"assets/results/{figure.name}", abs_src_path=str(figure)))
    return files


if __name__ == "__main__":  # python docs/hooks.py README.md examples/README.md: their figures from the files
    for page in sys.argv[1:]:
        path = Path(page)
        path.write_text(refresh(path.read_text()))
