"""Ports on this machine: a free one for a server to take, and whether the one a user asked for can be bound
(one error line when it cannot). Apart from `vllm_server` so `autorl serve` checks its port without the vLLM
process code."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from ..errors import AutoRLError

if TYPE_CHECKING:
    from .config import ServerConfig


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port(config: ServerConfig) -> None:
    """One error line when the port `config` asks for is in use (an unset port is free: one is chosen)."""
    if config.port is not None and port_in_use(config.host, config.port):
        raise AutoRLError(f"port {config.port} on {config.host} is in use; choose another port or leave it unset")


def port_in_use(host: str, port: int) -> bool:
    """Whether `host:port` cannot be bound now (another process listens there)."""
    return bind_error(host, port) is not None


def bind_error(host: str, port: int) -> str | None:
    """Why `host:port` cannot be bound now (in use, no such interface: the system's words), or None."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
        return None
