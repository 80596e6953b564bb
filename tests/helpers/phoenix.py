"""Arize Phoenix for the tracing test, in a virtual environment of its own (it pins newer web packages than
autorl's server): AUTORL_PHOENIX_PYTHON names its interpreter; else Phoenix installed beside autorl is used;
else that environment is made once under autorl's cache (`python -m venv`, `pip install
arize-phoenix==VERSION`, about 2 minutes). The install starts in the background as soon as the suite has
collected the tracing test (tests/conftest.py), so it overlaps the tests that run before it. Each pytest-xdist
worker collects it and starts one: they take turns on a lock file, and one that finds the environment made
does nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

VERSION = "20.26.1"
ENV = Path.home() / ".cache" / "autorl" / f"phoenix-{VERSION}"
LOG = ENV.parent / f"phoenix-{VERSION}.log"
"""What the install printed (a file: a pipe nobody reads until the test runs could fill and stall pip)."""
INSTALL_TIMEOUT_S = 900
_install: subprocess.Popen | None = None


def _given() -> str | None:
    """The interpreter that needs no install, if there is one."""
    if given := os.environ.get("AUTORL_PHOENIX_PYTHON"):
        return given
    return sys.executable if importlib.util.find_spec("phoenix") else None


def start_install() -> None:
    """Start making the environment in the background, unless it exists or is not needed."""
    global _install
    if _install is None and _given() is None and not (ENV / "bin" / "python").exists():
        LOG.parent.mkdir(parents=True, exist_ok=True)
        make = (
            f"test -x {ENV}/bin/python || {{ rm -rf {ENV}.tmp && {sys.executable} -m venv {ENV}.tmp"
            f" && {ENV}.tmp/bin/pip install -q arize-phoenix=={VERSION} && mv {ENV}.tmp {ENV}; }}"
        )  # whole or not at all: an interrupted install is redone
        with LOG.open("a") as log:
            _install = subprocess.Popen(
                ["flock", f"{ENV}.lock", "sh", "-c", make], stdout=log, stderr=subprocess.STDOUT
            )


def python() -> tuple[str | None, str]:
    """Phoenix's interpreter once it is there, else None and what the install printed."""
    if given := _given():
        return given, ""
    if not (ENV / "bin" / "python").exists():
        start_install()
        try:
            _install.wait(timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _install.kill()
            return None, f"no install within {INSTALL_TIMEOUT_S} s"
        if _install.returncode != 0:
            return None, LOG.read_text(errors="replace")[-500:]
    return str(ENV / "bin" / "python"), ""
