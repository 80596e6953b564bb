"""Errors a user can cause. The CLI prints them as one line and exits non-zero."""


class AutoRLError(Exception):
    """A problem the user can fix; its message says what to fix, in one line."""


class ModelNotFoundError(AutoRLError):
    """`base_model` names neither an embedded model nor a local Hugging Face directory."""


class ServerStartError(AutoRLError):
    """The inference server could not be started; the message carries the tail of its log."""
