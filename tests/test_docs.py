"""The docs site builds with no warning (a broken link or reference fails), and the README stays a short page
whose example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.docs import ROOT, marked_block, marked_blocks
from tests.helpers.limits import scaled

README = ROOT / "README.md"


def test_the_site_builds_strict(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(110),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "cli" / "index.html").read_text().count("Usage: autorl") >= 9  # autorl + 8 commands
    assert "TrainableModel" in (tmp_path / "site" / "api" / "autorl" / "index.html").read_text()


def docs_hooks():
    """docs/hooks.py, as mkdocs loads it: by path, not as a package."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    return hooks


def test_the_code_map_lists_every_module_with_its_docstring_s_opening():
    """The file-by-file map (the docs' Code map page) is read from the code: a module added anywhere in the
    packages appears in it with the first paragraph of its docstring, without a doc edited by hand."""
    hooks = docs_hooks()
    page = hooks.code_map()
    packages = [init.parent for name in hooks.MAPPED for init in sorted((ROOT / name).rglob("__init__.py"))]
    modules = [m for package in packages for m in sorted(package.glob("*.py")) if m.name != "__init__.py"]
    assert len(modules) > 100
    sections = page.split("\n## ")
    for module in modules:
        (section,) = [s for s in sections if s.startswith(f"`{module.parent.relative_to(ROOT)}/`")]
        assert f"- `{module.name}`: " in section, module
    bookkeeping = "- `bookkeeping.py`: What a training step does once its update is written"
    assert bookkeeping in page and "## `pipelines/steps/`" in page


@pytest.mark.parametrize("page", [README, ROOT / "examples" / "README.md"], ids=["README", "examples"])
def test_every_figure_a_readme_quotes_is_what_its_results_file_says(page):
    """README.md and examples/README.md are not built by mkdocs: each measured figure there is the build's
    macro in a comment, then its text (docs/hooks.py `FIGURE`), and the text must be what the macro draws from
    the results file now; a paragraph that names a result file draws at least one figure so."""
    hooks = docs_hooks()
    text = page.read_text()
    figures = hooks.readme_figures(text)
    assert figures
    wrong = [f"{typed!r} (its file says {drawn!r})" for typed, drawn in figures if typed != drawn]
    assert not wrong, f"{page.name}: {wrong}; `python docs/hooks.py README.md examples/README.md` writes them"
    for paragraph in re.split(r"\n\s*\n", text):
        if re.search(r"results/\w+\.json", paragraph):
            assert hooks.FIGURE.search(paragraph), f"a paragraph names a result but draws no figure: {paragraph}"


def test_the_readme_is_short_and_links_to_pages_that_exist():
    text = README.read_text()
    assert len(text.splitlines()) < 200
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(links) >= 10 and all((ROOT / link).is_file() for link in links), links


def test_every_marked_block_is_read_by_the_test_it_names():
    blocks = marked_blocks()
    assert len(blocks) >= 5
    for page, test in blocks:
        source = (ROOT / test).read_text()
        name = "README" if page == README else page.name
        assert name in source, f"{page.name}'s block says {test} runs it, but {test} never names {name}"


@pytest.mark.slow
@pytest.mark.timeout(
    1000
)  # a vLLM server start on the embedded model, 4 rollouts, one step: over 560 s on a loaded 2-core host
def test_the_readme_example_runs_as_written(tmp_path):
    code = marked_block(README, "tests/test_docs.py")
    assert len(code.strip().splitlines()) <= 25
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(900)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    step, reward = result.stdout.split()[-2:]
    assert int(step) == 1 and 0.0 <= float(reward) <= 1.0
    assert (tmp_path / ".autorl").is_dir()
