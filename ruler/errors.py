"""Errors a user of the judge can cause; each message says what to fix in one line."""


class RulerError(Exception):
    """A judging problem the user can fix (autorl's CLI prints it as one line, as it does its own errors)."""


class RulerInputError(RulerError):
    """The trajectories to score are unusable: an empty group, a single trajectory, no assistant message."""


class ModelSpecError(RulerError):
    """A model spec (`ruler.endpoint`) names no model or no known LiteLLM provider, or its key variable is unset."""


class JudgeSpecError(ModelSpecError):
    """A judge string names no known provider, or a `module:attribute` does not load to a judge."""


class JudgeFailedError(RulerError):
    """The judge gave no valid answer within the retries, or the provider refused the request."""

    attempts: int = 0
    """The judge requests made before giving up (set by RULER's retry loop)."""
