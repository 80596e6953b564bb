"""MkDocs hooks: the CLI reference written from the commands' `--help` at build time, the code map from the
modules' docstrings, and the figures the results pages show copied from `benchmarks/perf/results/` (the
benchmarks write them there)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "benchmarks" / "perf" / "results"


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


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    files.append(File.generated(config, "code-map.md", content=code_map()))
    for figure in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"assets/results/{figure.name}", abs_src_path=str(figure)))
    return files
