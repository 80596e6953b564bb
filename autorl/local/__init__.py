"""ART's `art.local` path: `LocalBackend` (`from art.local import LocalBackend`), which lives in
`autorl.backends.local`; `art.local.backend.LocalBackend` is `autorl.local.backend`."""

from ..backends.local import LocalBackend

__all__ = ["LocalBackend"]
