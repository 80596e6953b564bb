"""Errors a user of the judge can cause; each message says what to fix in one line."""

from autorl.errors import AutoRLError


class RulerError(AutoRLError):
    """A judging problem the user can fix."""


class RulerInputError(RulerError):
    """The trajectories to score are unusable: an empty group, a single trajectory, no assistant message."""


class JudgeSpecError(RulerError):
    """A judge string names no known provider, or a `module:attribute` does not load to a judge."""


class JudgeFailedError(RulerError):
    """The judge gave no valid answer within the retries, or the provider refused the request."""

    attempts: int = 0
    """The judge requests made before giving up (set by RULER's retry loop)."""
