"""Data-parallel training: one LoRA trained by N processes (`ClusterConfig.trainer_workers`), each on a share
of a step's sequences, their gradients averaged by torch's `DistributedDataParallel` (gloo on CPU, NCCL on
CUDA). autorl writes no collective of its own: DDP reduces the gradients, `torch.distributed.all_reduce`
sums the step's figures.

- **The split**: every rank gets the whole step (the scored groups), so each computes the same advantages,
  the same batch and the same loss normaliser over it; `shard` then gives each rank a share of the batch's
  sequences with token counts as equal as it can (longest first, onto the least loaded rank), the same
  assignment on every rank.
- **The loss**: a rank's summed loss is divided by the normaliser of the whole batch (the global token or
  sequence count, never a per-rank mean) and multiplied by the world size, which DDP's gradient average
  divides out again: the averaged gradient is the one a single trainer gets from the whole batch, so N
  workers equal one on the same groups (up to float summation order).
- **One optimizer state**: every rank holds an identical replica of the LoRA and its AdamW state, updated by
  the same averaged gradient (clipped by the same norm); only rank 0 writes the checkpoint.
- **A rank with no sequence** (fewer sequences than ranks) still takes part in the gradient average with one
  sequence's forward and backward weighted 0, so every rank runs the same collectives in the same order.

**Why torch.distributed in autorl's own Ray actors, not Ray Train.** The ranks are the `TrainerActor`s a
cluster run already starts (autorl/backends/cluster/), placed together by a Ray placement group; rank 0
gives an address, every rank calls `torch.distributed.init_process_group` there, and DDP does the rest.
Ray Train's `TorchTrainer` sets up the same process group, but around a training function that owns the
loop for a whole `fit()`: its data, its checkpoints (`ray.train.report`) and its restarts. autorl's trainer
is driven one step at a time by the driver, with groups that exist only once their rollouts are judged,
and its checkpoints belong to the run directory that the rest of autorl reads (serving, resume, rollback).
Fitting that into `fit()` would take a queue from the driver into the training function: the hand-made
scheduler and RPC autorl does not write. With the actors, a step is one actor call per rank, a checkpoint
is written as with one trainer, and a dead worker is replaced by the driver from the newest checkpoint.
"""

from __future__ import annotations

import contextlib
import heapq
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

TIMEOUT = timedelta(minutes=10)
"""How long a rank waits in a collective for the others (the process group's timeout): a rank that died leaves
the others waiting this long at most; the cluster's driver ends them at once when it sees the death."""


@dataclass(frozen=True)
class DataParallel:
    """This process's place in a data-parallel trainer: its rank, how many ranks there are and where rank 0
    listens (`tcp://host:port`)."""

    rank: int
    world_size: int
    address: str

    def join(self, device: torch.device) -> None:
        """Join the process group (NCCL on CUDA, gloo otherwise); returns once every rank has joined."""
        import torch.distributed as dist

        if dist.is_initialized():
            return
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL's communicator and `sum`'s tensors on this rank's GPU, not GPU 0
        dist.init_process_group(**self.group_options(device))

    def group_options(self, device: torch.device) -> dict[str, Any]:
        """`torch.distributed.init_process_group`'s arguments for this rank on `device`: NCCL bound to the rank's
        GPU (`device_id`, which also makes the group's collectives use it), gloo on CPU."""
        options: dict[str, Any] = {
            "backend": "nccl" if device.type == "cuda" else "gloo",
            "init_method": self.address,
            "rank": self.rank,
            "world_size": self.world_size,
            "timeout": TIMEOUT,
        }
        if device.type == "cuda":
            options["device_id"] = torch.device("cuda", device.index if device.index is not None else 0)
        return options

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """`model` under DDP: its trainable parameters' gradients averaged over the ranks in the backward that
        `synced` lets through. DDP broadcasts rank 0's parameters and buffers once, here; the buffers are
        frozen, so not again at each forward."""
        from torch.nn.parallel import DistributedDataParallel

        # not at each forward: a rank's forwards differ in number from another's (its share's micro-batches)
        newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters  # torch >= 2.13
        options: dict[str, Any] = {"forward_sync_buffers": False} if newer else {"broadcast_buffers": False}
        if device.type == "cuda":
            options["device_ids"] = [device.index if device.index is not None else torch.cuda.current_device()]
        return DistributedDataParallel(model, **options)

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each value summed over the ranks (every rank passes the same keys)."""
        import torch.distributed as dist

        keys = sorted(values)
        device = (
            torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        )
        tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return dict(zip(keys, tensor.tolist(), strict=True))

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def shard(sizes: Sequence[int], rank: int, world_size: int) -> list[int]:
    """The indices of the items `rank` takes, in their order, when items of `sizes` tokens are split over
    `world_size` ranks with token counts as equal as possible: longest first, each onto the least loaded
    rank (the lower rank on a tie). Deterministic, so every rank computes the same split."""
    loads = [(0, r) for r in range(world_size)]
    owner = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, r = heapq.heappop(loads)
        owner[index] = r
        heapq.heappush(loads, (load + sizes[index], r))
    return [i for i in range(len(sizes)) if owner[i] == rank]


@dataclass
class Share:
    """What one rank trains of a step's items: `items` (in the batch's order), and the `weight` its summed
    loss is multiplied by before the backward: the world size, whose division in DDP's gradient average it
    cancels (1 with one trainer); 0 for a rank with nothing of its own, whose `items` are then one of
    another rank's, run only so that it takes part in the gradient average."""

    items: list[Any]
    weight: float


def share(items: Sequence[Any], sizes: Sequence[int], parallel: DataParallel | None) -> Share:
    """This rank's `Share` of `items` (sizes: each item's token count); all of them without `parallel`."""
    if parallel is None:
        return Share(list(items), 1.0)
    mine = [items[i] for i in shard(sizes, parallel.rank, parallel.world_size)]
    if mine or not items:
        return Share(mine, float(parallel.world_size))
    return Share([items[0]], 0.0)


def synced(ddp: Any, micro_batches: list[Any]) -> Iterator[Any]:
    """Yield the micro-batches of one optimizer step, each's forward and backward to run in the loop body;
    under DDP (`ddp`: the wrapped model, or None) the gradients are only averaged over the ranks in the last
    one's backward (the ones before accumulate locally, DDP's `no_sync`)."""
    for index, micro in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with contextlib.nullcontext() if ddp is None or last else ddp.no_sync():
            yield micro
