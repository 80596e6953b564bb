"""Errors a user can cause. The CLI prints them as one line and exits non-zero."""


class AutoRLError(Exception):
    """A problem the user can fix; its message says what to fix, in one line."""


class ModelNotFoundError(AutoRLError):
    """`base_model` names neither an embedded model nor a local Hugging Face directory."""


class ServerStartError(AutoRLError):
    """The inference server could not be started; the message carries the tail of its log."""


class FatalError(AutoRLError):
    """An error that ends the run, not only the rollout it happened in: rollouts re-raise it where they
    keep their other exceptions as data (`TrajectoryGroup.exceptions`)."""


class McpServerDied(FatalError):
    """An MCP server of the task did not start, died a second time (it is restarted once), or did not
    restart (`autorl.agents.mcp`)."""


class DiskFullError(AutoRLError):
    """A write failed for lack of disk space (`autorl.atomic`); what was being written is absent or the
    previous version, so the same command resumes once space is freed."""


class ServerDiedError(FatalError):
    """The policy's vLLM server died more often than `ServerConfig.max_restarts` allows."""


LocalServingUnavailableError = ServerDiedError
"""ART's name for the fatal error of a policy server that is gone (training stops instead of counting the rollouts
that could not reach it as failures)."""


class MissingExtraError(AutoRLError):
    """A feature needs packages of an optional extra that are not installed; the message names the extra."""


class NoModelCallError(AutoRLError):
    """A wrapped rollout (`autorl.agents.langgraph.wrap_rollout`) made no chat completion through a chat model of
    its model, so there is nothing to train on."""


class NoTrajectoryError(AutoRLError, RuntimeError):
    """A trajectory was asked for where there is none: `current_trajectory(require=True)` outside a capture
    scope, or a `capture_yielded_trajectory` whose coroutine handed none over (a `RuntimeError`, as ART's)."""


QUOTED_CHARS = 40
"""How much of a value an error message quotes (a 5 MB name is not echoed back whole)."""


def quoted(value: object, limit: int = QUOTED_CHARS) -> str:
    """`repr(value)` of at most `limit` characters of it, its length said when it was cut: how an error line
    names a value a user sent."""
    text = value if isinstance(value, str) else str(value)
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


class UnsupportedArgumentError(AutoRLError, TypeError):
    """A keyword of an ART call (`backend.train(..., advantage_balance=0.5)`) that autorl has no setting for, or a
    value of one it cannot honour; the message names it (a `TypeError`, as Python's for an unknown keyword)."""


class NotInAutoRLError(AutoRLError, NotImplementedError):
    """A name of ART that autorl does not have (a Tinker or SkyPilot backend, a Megatron trainer):
    the message names it and what to use in autorl instead."""


def refusing(module: str, refused: dict[str, str]) -> object:
    """A module `__getattr__` that answers each name of `refused` (ART's names autorl does not have) with one
    `NotInAutoRLError` line, "<module>.<name>: <what to use instead>", and any other unknown name as Python does."""

    def __getattr__(name: str) -> object:
        if name in refused:
            raise NotInAutoRLError(f"{module}.{name}: {refused[name]}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
