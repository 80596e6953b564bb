"""`iterate_dataset`: epochs x batches over a list, each epoch in its own fixed shuffled order, resumable at a
step (ART's `art.utils.iterate_dataset`)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from typing import Generic, NamedTuple, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")


class DatasetBatch(NamedTuple, Generic[T]):
    """One batch: read its fields (`batch.items`, `batch.step`), or unpack it as ART's older tuple
    `items, epoch, step, epoch_step`."""

    items: list[T]
    """The dataset's items of this batch (`groups_per_step` of them; the last of an epoch may have fewer)."""
    epoch: int
    """The epoch, from 0."""
    step: int
    """The batch's step over all epochs, from 0: pass the model's step (`await model.get_step()`) as
    `initial_step` to resume after the batches already trained."""
    epoch_step: int
    """The batch's index within its epoch, from 0."""


def iterate_dataset(
    dataset: Sequence[T],
    groups_per_step: int = 1,
    num_epochs: int = 1,
    initial_step: int = 0,
    use_tqdm: bool = True,
) -> Iterator[DatasetBatch[T]]:
    """The batches of `groups_per_step` items of `dataset`, epoch after epoch.

    Epoch e visits the items in the order `random.Random(e)` shuffles them into (ART's order, without
    reseeding the global `random`), so a resumed run sees the batches it would have seen. Batches before
    `initial_step` are skipped; the progress bar (`use_tqdm`) counts them as done.
    """
    if groups_per_step < 1:
        raise ValueError(f"iterate_dataset: groups_per_step must be at least 1, got {groups_per_step}")
    if not dataset:
        return
    steps_per_epoch = math.ceil(len(dataset) / groups_per_step)
    bar = tqdm(
        initial=min(initial_step, steps_per_epoch * num_epochs),
        total=steps_per_epoch * num_epochs,
        desc="Iterating dataset",
        unit="batch",
        disable=not use_tqdm,
    )
    try:
        for epoch in range(num_epochs):
            order = list(range(len(dataset)))
            random.Random(epoch).shuffle(order)
            for epoch_step in range(steps_per_epoch):
                step = epoch * steps_per_epoch + epoch_step
                if step < initial_step:
                    continue
                indices = order[epoch_step * groups_per_step : (epoch_step + 1) * groups_per_step]
                yield DatasetBatch([dataset[i] for i in indices], epoch, step, epoch_step)
                bar.update(1)
    finally:
        bar.close()
