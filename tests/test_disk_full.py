"""A full disk, for real: a size-limited tmpfs filled up. A write that does not fit is one clear error,
leaves no half-written file and no temporary behind, keeps the previous version, and the same write
succeeds once space is freed. Mounting needs root (CI runs as root); elsewhere the tests are skipped."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autorl import TrainConfig, TrainerConfig, Trajectory, TrajectoryGroup
from autorl.atomic import atomic_file, atomic_text
from autorl.errors import DiskFullError
from autorl.training.checkpoints import latest_checkpoint
from autorl.training.trainer import OPTIMIZER_FILE, GRPOTrainer
from tests.helpers.disk import fill, tmpfs
from tests.helpers.tiny import choice


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 2 MiB tmpfs."""
    with tmpfs(tmp_path / "disk", "2m") as disk:
        yield disk


def test_a_file_that_does_not_fit_is_one_line_and_the_old_one_stays(small_disk):
    path = small_disk / "run.json"
    atomic_text(path, "old")
    filler = fill(small_disk, leave=64 * 1024)
    with pytest.raises(DiskFullError) as error:
        atomic_text(path, "x" * 1024 * 1024)
    assert str(error.value).startswith(f"disk full while writing {path};") and "\n" not in str(error.value)
    assert path.read_text() == "old"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "run.json"], "no temporary left"
    filler.unlink()
    atomic_text(path, "x" * 1024 * 1024)  # space freed: the same write succeeds
    assert path.stat().st_size == 1024 * 1024


def test_a_checkpoint_that_does_not_fit_is_absent_and_saves_once_space_is_freed(tiny_model, small_disk):
    checkpoints = small_disk / "checkpoints"
    trainer = GRPOTrainer(tiny_model, checkpoints, TrainerConfig())
    prompt = [{"role": "user", "content": "hi"}]
    group = TrajectoryGroup(
        [
            Trajectory(messages_and_choices=[*prompt, choice(text, [5, 6, 7])], reward=r)
            for text, r in (("a", 0.0), ("b", 1.0))
        ]
    )
    metrics = trainer.step([group], TrainConfig())
    filler = fill(small_disk, leave=16 * 1024)  # less than the adapter and optimizer state take
    with pytest.raises(DiskFullError, match=r"disk full while writing .*checkpoints/0001; nothing was half-written"):
        trainer.save(1, metrics)
    assert latest_checkpoint(checkpoints) is None
    assert not list(checkpoints.iterdir()), "no partial checkpoint or temporary left"
    filler.unlink()
    path = trainer.save(1, metrics)
    assert latest_checkpoint(checkpoints) == (1, path)
    assert torch.load(path / OPTIMIZER_FILE)["state"], "the checkpoint is complete"


def test_a_full_disk_is_recognised_though_the_failed_write_freed_its_space(tmp_path):
    """torch reports a full disk as a failed write (RuntimeError "unexpected pos", no ENOSPC in its chain)
    and removing the temporary frees what it took: the disk is asked before that (faults.py found a 29 MB
    checkpoint failing on a disk with 12 MiB free reported as a raw torch error)."""

    def write_as_torch_does(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY)
        try:
            while os.write(fd, b"\0" * 2**16):
                pass
        except OSError:  # swallowed: torch's writer reports only the bytes it could not place
            pass
        finally:
            os.close(fd)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    with tmpfs(tmp_path / "disk", "16m") as disk:
        fill(disk, leave=4 * 2**20)
        with pytest.raises(DiskFullError, match="disk full while writing"):
            atomic_file(disk / "optimizer.pt", write_as_torch_does)
        assert sorted(p.name for p in disk.iterdir()) == ["filler"], "no temporary left"
