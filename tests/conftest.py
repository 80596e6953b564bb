"""Fixtures every test file may take; what test files share beyond fixtures is in `tests/helpers/`."""

import os
from pathlib import Path

import pytest

from autorl.serving.config import EAGER_ENV
from tests.helpers import phoenix
from tests.helpers.cli import run  # noqa: F401 (a fixture: `autorl run` up to the pipeline)
from tests.helpers.remote import chat, served  # noqa: F401 (fixtures: `autorl serve`'s app over a scripted endpoint)
from tests.helpers.routing import proxied, serve  # noqa: F401 (fixtures: chat servers behind a replica pool)
from tests.helpers.spans import spans  # noqa: F401 (a fixture: tracing into an in-memory exporter)
from tests.helpers.tiny import tiny_model_dir, tiny_tokenizer

os.environ.setdefault(EAGER_ENV, "1")
"""Every vLLM server the suite starts (in this process and in the runs it starts) skips torch.compile: on CPU
a start takes about half as long, and starts are most of the slow tests' time. test_backend_embedded.py runs
the compiled default (`enforce_eager=False`)."""


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
