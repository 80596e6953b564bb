"""ART's `art.utils` path: `retry` (a decorator that calls a function again after an exception),
`iterate_dataset` (epochs x batches over a list, resumable), `limit_concurrency` (at most N calls at once),
`get_trajectory_messages` (a trajectory as chat messages), `get_model_step` (a model's newest step from its
directory), and ART's modules: `sft` (SFT data and schedule), `output_dirs` (where a model lives on disk),
`trajectory_logging` (ART's parquet files), `strip_logprobs` (a copy without logprobs), and `benchmarking` (trajectories as a table and
ART's comparison charts; needs the `plotting` extra). Import from here or from the modules."""

from .get_model_step import get_model_step
from .get_trajectory_messages import get_trajectory_messages
from .iterate_dataset import DatasetBatch, iterate_dataset
from .limit_concurrency import limit_concurrency
from .retry import retry

__all__ = [
    "DatasetBatch",
    "get_model_step",
    "get_trajectory_messages",
    "iterate_dataset",
    "limit_concurrency",
    "retry",
]
_MODULES = {"benchmarking", "output_dirs", "sft", "strip_logprobs", "trajectory_logging"}


def __getattr__(name: str) -> object:
    """ART's modules reachable as attributes (`art.utils.sft`, ...), imported on first use: none is needed to
    roll out."""
    if name in _MODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'autorl.utils' has no attribute {name!r}")
