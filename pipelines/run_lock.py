"""One process at a time per run name and per training directory (`autorl.home.exclusive` locks in
`<home>/locks/`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autorl.backends.run_dir import ensure_writable
from autorl.home import exclusive

LOCKS = "locks"
"""The directory under the home that holds the lock files."""


@contextmanager
def run_locks(home: Path, name: str, train_key: str) -> Iterator[None]:
    """The locks of one `autorl run`: its run name, then the training it writes (another run name with
    the same training settings shares that training directory)."""
    locks = home / LOCKS
    ensure_writable(locks)
    with (
        exclusive(locks / f"run-{name}.lock", f"run {name!r}", "wait for it to finish, or choose another --name"),
        exclusive(
            locks / f"train-{train_key}.lock",
            f"training {train_key} (another run with the same settings)",
            "wait for that run to finish; it trains exactly what this one would",
        ),
    ):
        yield
