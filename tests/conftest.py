"""Fixtures every test file may take; what test files share beyond fixtures is in `tests/helpers/`."""

from pathlib import Path

import pytest

from tests.helpers.tiny import tiny_model_dir, tiny_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))
