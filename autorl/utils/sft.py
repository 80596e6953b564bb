"""ART's `art.utils.sft`: supervised fine-tuning data and its learning-rate schedule.

`iterate_file` reads ART's JSONL (one `{"messages": [...], "tools": [...]}` conversation a line) as trajectories;
`create_sft_dataset_iterator` cuts trajectories into chunks of batches, each with its slice of one schedule
over the whole run (warm-up, then linear or cosine decay, or constant), for one `model.train_sft(chunk.trajectories,
chunk.config)` call each.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..errors import AutoRLError
from ..trajectories import Trajectory
from ..types import TrainSFTConfig

if TYPE_CHECKING:
    import os

Schedule = Literal["cosine", "linear", "constant"]
"""How the learning rate goes after warm-up: down to 0 along a cosine or a line, or stays at its peak."""


class SFTChunk(NamedTuple):
    """One `train_sft` call's share of a run: its trajectories and their config (one learning rate per batch)."""

    trajectories: list[Trajectory]
    config: TrainSFTConfig
    step: int
    """The chunk's first batch, counted over all epochs from 0 (pass it back as `initial_step` to resume)."""
    epoch: int
    epoch_step: int
    """The chunk's first batch within its epoch."""


def create_lr_schedule(
    total_steps: int, peak_lr: float, method: Schedule = "linear", warmup_steps: int = 0, min_lr: float = 0.0
) -> list[float]:
    """A learning rate per step: a linear warm-up over `warmup_steps` (its first step already above `min_lr`),
    then `method` from `peak_lr` down to `min_lr` at the last step (cosine, linear) or `peak_lr` throughout."""
    if method not in ("cosine", "linear", "constant"):
        raise AutoRLError(f"learning-rate schedule {method!r}: use cosine, linear or constant")
    rates = []
    decay = total_steps - warmup_steps
    for step in range(total_steps):
        if step < warmup_steps:
            rates.append(min_lr + (peak_lr - min_lr) * (step + 1) / warmup_steps)
            continue
        done = (step - warmup_steps) / (decay - 1) if decay > 1 else 0.0
        if method == "cosine":
            rates.append(min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * done)) / 2)
        elif method == "linear":
            rates.append(peak_lr - (peak_lr - min_lr) * done)
        else:
            rates.append(peak_lr)
    return rates


def create_sft_dataset_iterator(
    trajectories: list[Trajectory],
    chunk_size: int = 10,
    epochs: int = 1,
    batch_size: int = 2,
    peak_lr: float = 2e-4,
    schedule_type: Schedule = "linear",
    warmup_ratio: float = 0.1,
    shuffle: bool = True,
    seed: int = 42,
    initial_step: int = 0,
    show_progress: bool = True,
) -> Iterator[SFTChunk]:
    """The chunks of `chunk_size` batches of `batch_size` trajectories, epoch after epoch (each shuffled with
    `seed + epoch`), each with its slice of one schedule over every batch of the run (`create_lr_schedule`,
    warm-up `warmup_ratio` of the batches), for one `model.train_sft(chunk.trajectories, chunk.config)` each.
    Chunks that start before batch `initial_step` are skipped (a resumed run continues at a chunk's start)."""
    if chunk_size < 1 or batch_size < 1 or epochs < 0:
        raise AutoRLError("create_sft_dataset_iterator: chunk_size and batch_size must be at least 1")
    if not trajectories:
        return
    per_epoch = math.ceil(len(trajectories) / batch_size)
    total = per_epoch * epochs
    rates = create_lr_schedule(total, peak_lr, schedule_type, int(total * warmup_ratio))
    per_chunk = chunk_size * batch_size
    from tqdm.auto import tqdm

    with tqdm(
        total=total, initial=min(initial_step, total), desc="SFT", unit="batch", disable=not show_progress
    ) as bar:
        for epoch in range(epochs):
            order = list(trajectories)
            if shuffle:
                random.Random(seed + epoch).shuffle(order)
            for start in range(0, len(order), per_chunk):
                epoch_step = start // batch_size
                step = epoch * per_epoch + epoch_step
                chunk = order[start : start + per_chunk]
                batches = math.ceil(len(chunk) / batch_size)
                if step < initial_step:
                    continue
                config = TrainSFTConfig(learning_rate=rates[step : step + batches], batch_size=batch_size)
                yield SFTChunk(chunk, config, step, epoch, epoch_step)
                bar.update(batches)


def _trajectory(line: str, where: str) -> Trajectory:
    try:
        row: Any = json.loads(line)
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
            raise ValueError('expected an object with "messages" (a list of chat messages)')
        return Trajectory(messages_and_choices=row["messages"], tools=row.get("tools"))
    except ValueError as exc:  # json's and pydantic's errors are ValueErrors
        raise AutoRLError(f"{where}: {' '.join(str(exc).split())[:300]}") from None


def iterate_file(
    file_path: str | os.PathLike,
    epochs: int = 1,
    shuffle_buffer_size: int = 10000,
    seed: int = 42,
    initial_skip: int = 0,
) -> Iterator[Trajectory]:
    """The conversations of a JSONL file (a `{"messages": [...], "tools": [...]}` object a line; blank lines
    skipped) as trajectories, `epochs` times, each epoch shuffled through a buffer of `shuffle_buffer_size`
    (seeded `seed + epoch`; 1: the file's order) without reading the whole file; the first `initial_skip` are
    left out. A line that is not such an object is one error naming the file and the line."""
    path = Path(file_path)
    if not path.is_file():
        raise AutoRLError(f"SFT file {str(path)!r} does not exist")
    shuffled = (_shuffled(path, random.Random(seed + epoch), shuffle_buffer_size) for epoch in range(epochs))
    yield from itertools.islice(itertools.chain.from_iterable(shuffled), initial_skip, None)


def _shuffled(path: Path, rng: random.Random, size: int) -> Iterator[Trajectory]:
    """The file's conversations in the order a buffer of `size` shuffles them into."""
    buffer: list[Trajectory] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                buffer.append(_trajectory(line, f"{path}:{number}"))
                if len(buffer) >= size:
                    yield buffer.pop(rng.randrange(len(buffer)))
    while buffer:
        yield buffer.pop(rng.randrange(len(buffer)))
