"""ART's `art.utils` path: `retry` (a decorator that calls a function again after an exception) and
`iterate_dataset` (epochs x batches over a list, resumable). Import from here or from the modules."""

from .iterate_dataset import DatasetBatch, iterate_dataset
from .retry import retry

__all__ = ["DatasetBatch", "iterate_dataset", "retry"]
