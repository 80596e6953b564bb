"""ART's `art.local.backend` path: `from art.local.backend import LocalBackend`."""

from ..backends.local import LocalBackend

__all__ = ["LocalBackend"]
