"""ART's `art.local` path: `LocalBackend`, which lives in `autorl.backends.local`."""

from .backends.local import LocalBackend

__all__ = ["LocalBackend"]
