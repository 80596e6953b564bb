"""Runs ART's own tests (copied here with their imports changed) as ART's suite runs them: an `async def` test is
run in an event loop of its own (ART's suite has pytest-asyncio, autorl's has none), and each is a slow test (it
serves and trains the embedded model) with a time limit, as CONTRIBUTING.md asks of slow tests."""

import asyncio
import inspect

import pytest

from tests.helpers.limits import scaled

TIMEOUT_S = 600
"""test_step_skipping: a vLLM start and two training steps on the embedded model (~3 min on 2 cores)."""


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent.name == "art_tests":
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.timeout(scaled(TIMEOUT_S)))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
