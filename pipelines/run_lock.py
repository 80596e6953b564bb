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


def lock_files(home: Path, name: str, train_key: str) -> tuple[Path, Path]:
    """The lock files of run `name` and of the training it writes (their directory made if missing)."""
    locks = home / LOCKS
    ensure_writable(locks)
    return locks / f"run-{name}.lock", locks / f"train-{train_key}.lock"


@contextmanager
def run_locks(home: Path, name: str, train_key: str) -> Iterator[None]:
    """The locks of one `autorl run`: its run name, then the training it writes (another run name with
    the same training settings shares that training directory)."""
    run_file, train_file = lock_files(home, name, train_key)
    with (
        exclusive(run_file, f"run {name!r}", "wait for it to finish, or choose another --name"),
        exclusive(
            train_file,
            f"training {train_key} (another run with the same settings)",
            "wait for that run to finish; it trains exactly what this one would",
        ),
    ):
        yield


@contextmanager
def finished_run(home: Path, name: str, train_key: str) -> Iterator[None]:
    """Hold run `name`'s locks while a command reads its checkpoints (`autorl export`): one error line while a
    run still writes them, and no run starts writing them meanwhile."""
    run_file, train_file = lock_files(home, name, train_key)
    advice = "wait for it to finish: export reads a finished run"
    with exclusive(run_file, f"run {name!r}", advice), exclusive(train_file, f"run {name!r}'s training", advice):
        yield
