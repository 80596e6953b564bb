"""The custom-judge example of the judge's docs page runs as written and prints what it says."""

from __future__ import annotations

from tests.helpers.docs import DOCS, marked_block

DOC = DOCS / "ruler.md"


def test_custom_judge_example_runs(capsys):
    code = marked_block(DOC, "tests/test_ruler_docs.py")
    assert len(code.strip().splitlines()) <= 12
    exec(compile(code, str(DOC), "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out == "[1.0, 0.0]\n"
