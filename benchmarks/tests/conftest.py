"""The benchmarks' own tests: the code of `benchmarks/perf/` (its scripts' bookkeeping, the learning tasks and
their judges, `stale.py`) and the learning benchmark's short regression run. A script imports its siblings
(`_common`, `learning`, ...) with `benchmarks/perf/` first on `sys.path`, as running it puts it there; its tests
import them the same way. `tests/` (the product's tests) imports nothing of `benchmarks/`, and the benchmarks may
take what they share with the tests from `tests/helpers/` (tests/test_layout.py checks the first)."""

import os
import sys
from pathlib import Path

import pytest

from autorl.serving.config import EAGER_ENV
from tests.helpers.tiny import tiny_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "perf"))
os.environ.setdefault(EAGER_ENV, "1")  # the vLLM servers of their runs start as the suite's do (tests/conftest.py)


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()
