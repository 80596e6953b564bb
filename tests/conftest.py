"""Fixtures every test file may take; what test files share beyond fixtures is in `tests/helpers/`."""

import os
import sys
from pathlib import Path

import pytest

from autorl.errors import ServerStartError
from autorl.serving.config import EAGER_ENV, cuda_available
from autorl.serving.environment import LAUNCHER_ENV
from autorl.serving.launcher import RunningLauncher, start_launcher
from tests.helpers import phoenix
from tests.helpers.cli import run  # noqa: F401 (a fixture: `autorl run` up to the pipeline)
from tests.helpers.limits import SHARERS, scaled
from tests.helpers.remote import chat, served  # noqa: F401 (fixtures: `autorl serve`'s app over a scripted endpoint)
from tests.helpers.routing import proxied, serve  # noqa: F401 (fixtures: chat servers behind a replica pool)
from tests.helpers.spans import spans  # noqa: F401 (a fixture: tracing into an in-memory exporter)
from tests.helpers.tiny import tiny_model_dir, tiny_tokenizer

os.environ.setdefault(EAGER_ENV, "1")
"""Every vLLM server the suite starts (in this process and in the runs it starts) skips torch.compile: on CPU
a start takes about half as long, and starts are most of the slow tests' time. test_backend_embedded.py runs
the compiled default (`enforce_eager=False`)."""


LAUNCHER = pytest.StashKey[RunningLauncher]()
SHARED_CORES_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "RAY_worker_niceness": "0"}
"""The environment of every process of a suite run by several workers (set before they start), so the workers
share the cores: their OpenMP threads (torch's, vLLM's engines') sleep when idle instead of spinning on the
cores the other worker's threads need, the fastest setting for two servers decoding at once
(`benchmarks/perf/perf_shared_cores.py`); and the Ray files' actors (replicas, trainers) run at the other
worker's priority, not at Ray's default niceness of 15 for its workers, under which they waited on the other
worker's tests past their time limits."""


def pytest_configure(config: pytest.Config) -> None:
    """The suite (README's `-n 2`, slow tests not deselected) starts its CPU vLLM servers through one launcher
    (`autorl.serving.launcher`), which imports vLLM's server once for the whole run instead of once per start:
    servers the workers start, and those of the runs they start, which inherit `LAUNCHER_ENV`. A test that
    looks at the processes a run started takes `own_servers`; tests/test_launcher.py tests the launcher.
    Under several workers, every process they start shares the cores with the other's (`SHARED_CORES_ENV`)."""
    if hasattr(config, "workerinput") or LAUNCHER_ENV in os.environ or not config.getoption("numprocesses", None):
        return
    for key, value in SHARED_CORES_ENV.items():  # inherited by the workers, the launcher, Ray's raylet, and
        os.environ.setdefault(key, value)  # through them by every server and run they start
    if "not slow" in (config.getoption("markexpr") or "") or cuda_available():
        return
    try:
        config.stash[LAUNCHER] = start_launcher()
    except ServerStartError as exc:  # the servers then start as they would without one: slower, not failing
        print(f"no vLLM launcher for this run: {exc}", file=sys.stderr)


def pytest_unconfigure(config: pytest.Config) -> None:
    if launcher := config.stash.get(LAUNCHER, None):
        launcher.stop()


@pytest.fixture
def own_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vLLM servers this test starts (itself or through the runs it starts) are descendants of the process
    that starts them, not forked by the suite's launcher: for tests that look at a run's process tree."""
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)


RAY_FILES = frozenset(
    {"test_art_training_api.py", "test_cluster_connect.py", "test_cluster_e2e.py", "test_cluster_judge.py",
     "test_trainer_workers.py"}
)  # fmt: skip
"""The files that start a local Ray cluster: under two workers (README's `-n 2`) they run in one, so two clusters
never share the machine's memory and cores."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist's `--dist loadgroup` a file is one unit of work (its module fixtures start once), the
    Ray files one unit together; files with slow tests come first, so the longest units are not the last ones
    handed out and the two workers finish together."""
    for item in items:
        group = "ray" if item.path.name in RAY_FILES else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
        if SHARERS > 1:  # each test's limit (its mark, else the ini's) is for the machine alone
            marked = item.get_closest_marker("timeout")
            limit = marked.args[0] if marked and marked.args else item.config.getini("timeout")
            item.add_marker(pytest.mark.timeout(scaled(float(limit))), append=False)
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: each file keeps its order


def pytest_collection_finish(session: pytest.Session) -> None:
    """Phoenix's own environment starts installing in the background once the tracing test is collected."""
    if any(item.path.name == "test_tracing_phoenix.py" for item in session.items):
        phoenix.start_install()


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))
