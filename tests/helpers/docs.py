"""The documentation's pages and the code blocks that tests run as written."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARKER = re.compile(r"<!-- tested by (tests/\w+\.py) -->\n```(\w+)\n(.*?)```", re.S)


def pages() -> list[Path]:
    """README.md and every page of the docs site."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def marked_block(page: Path, test: str, after: str = "") -> str:
    """The code block of `page` marked `<!-- tested by TEST -->` (the first one after the heading `after`)."""
    text = page.read_text()
    if after:
        text = text.split(after, 1)[1]
    for found in MARKER.finditer(text):
        if found.group(1) == test:
            return found.group(3)
    raise LookupError(f"{page.name} has no block tested by {test}")


def marked_blocks() -> list[tuple[Path, str]]:
    """(page, test file) of every marked block in README.md and the docs."""
    return [(page, found.group(1)) for page in pages() for found in MARKER.finditer(page.read_text())]


def docs_example() -> dict:
    """The names the docs' LangGraph example defines (`rollout`, `adder_group`, ...), run as written."""
    page = DOCS / "langgraph.md"
    code = marked_block(page, "tests/test_langgraph.py")
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(code, str(page), "exec"), namespace)
    return namespace
