"""Time limits that hold on a shared machine: each limit a test sets on work it waits for (a subprocess, a
server's start) is for the machine alone, and is multiplied by the number of pytest-xdist workers sharing it
(the README's `-n 2`: each test has about half the cores). The limits guard against hangs: none is a speed
claim, and none is tightened or loosened by anything else."""

from __future__ import annotations

import os

SHARERS = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
"""The workers running tests at once on this machine (pytest-xdist sets the variable in each)."""


def scaled(seconds: float) -> float:
    """`seconds`, the limit for the machine alone, for a test sharing it with `SHARERS - 1` others."""
    return seconds * SHARERS
