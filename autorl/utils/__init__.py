"""ART's `art.utils` path: `retry` (a decorator that calls a function again after an exception),
`iterate_dataset` (epochs x batches over a list, resumable), `limit_concurrency` (at most N calls at once),
`get_trajectory_messages` (a trajectory as chat messages), and `autorl.utils.sft` (ART's SFT data and schedule).
Import from here or from the modules."""

from .get_trajectory_messages import get_trajectory_messages
from .iterate_dataset import DatasetBatch, iterate_dataset
from .limit_concurrency import limit_concurrency
from .retry import retry

__all__ = ["DatasetBatch", "get_trajectory_messages", "iterate_dataset", "limit_concurrency", "retry"]


def __getattr__(name: str) -> object:
    """`art.utils.sft` reachable as an attribute (imported on first use: it is not needed to roll out)."""
    if name == "sft":
        import importlib

        return importlib.import_module(".sft", __name__)
    raise AttributeError(f"module 'autorl.utils' has no attribute {name!r}")
