"""ART's `art.utils.benchmarking.types`: `BenchmarkModelKey`, a model of a chart by name, label and split."""

from __future__ import annotations


class BenchmarkModelKey:
    """A model as ART's charts take it: its `name` (a model directory), the `display_name` its line or bar is
    labelled with (the name if not given), and the `split` whose trajectories are plotted ("val" if not given)."""

    def __init__(self, name: str, display_name: str | None = None, split: str | None = None):
        self.name = name
        self.display_name = display_name or name
        self.split = split or "val"

    def __str__(self) -> str:
        return self.display_name

    def __repr__(self) -> str:
        return f"BenchmarkModelKey({self.name!r}, {self.display_name!r}, {self.split!r})"
