"""The vLLM servers this process started, and the hooks that stop them all at exit and on SIGTERM
(`install_exit_hooks`): a server never outlives the process that started it. Apart from `vllm_server` so a
backend installs the hooks without loading the vLLM process code."""

from __future__ import annotations

import atexit
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .vllm_server import VLLMServer


started_servers: set[VLLMServer] = set()
"""The servers this process started and has not stopped (`VLLMServer.start` adds one, `stop` removes it)."""


def live_servers() -> list[VLLMServer]:
    """The servers this process started and has not stopped."""
    return list(started_servers)


def stop_all_servers() -> None:
    """Stop every server this process started (also run at exit)."""
    for server in live_servers():
        server.stop()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through finally blocks and atexit, which stop the servers


_exit_hooks = threading.Lock()
_exit_hooks_installed = False


def install_exit_hooks() -> None:
    """Stop this process's servers at exit and on SIGTERM (which then exits like Ctrl-C does); once, when
    the first server is about to start or a `LocalBackend` is made, never at import. SIGTERM is taken
    only from the main thread and only while nobody else handles it (the CLI cancels its run instead)."""
    global _exit_hooks_installed
    with _exit_hooks:
        if not _exit_hooks_installed:
            atexit.register(stop_all_servers)
            _exit_hooks_installed = True
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
