"""`autorl serve`: models trained and served on this machine for programs on others (`autorl.RemoteBackend`).

`config.py` holds the command's options (`ServeConfig`) and where the token comes from; `app.py` the HTTP
app (FastAPI) over a `LocalBackend`. `serve` runs it with uvicorn until Ctrl-C or SIGTERM, then stops the
models' vLLM servers.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

from autorl.errors import AutoRLError

from .config import MODELS_DIR, ServeConfig, resolve_token

log = logging.getLogger("autorl")


def check_port(host: str, port: int) -> None:
    """One error line when `host:port` cannot be bound (in use, or no such interface), before vLLM or FastAPI load."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise AutoRLError(
                f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port or --host"
            ) from None


def serve(config: ServeConfig, announce: Callable[[str], object] = print) -> None:
    """Serve until interrupted. `announce` gets the lines a user needs: the URL and where the token is (never
    the token)."""
    import uvicorn

    from autorl.backends.local import LocalBackend
    from pipelines.run_lock import exclusive

    from .app import ServedModels, make_app

    token, source = resolve_token(config)
    check_port(config.host, config.port)
    serve_dir = config.serve_dir()
    with exclusive(
        serve_dir / "lock", f"home {config.home}", "stop the other `autorl serve`, or choose another --home"
    ):
        backend = LocalBackend(config.home / MODELS_DIR, server=config.server)
        served = ServedModels(backend, serve_dir, config.lease_s)
        app = make_app(served, token, config.max_body_bytes)
        announce(f"autorl serve: {config.url} (OpenAI-compatible at {config.url}/v1); token: {source}")
        server = uvicorn.Server(
            uvicorn.Config(
                app, host=config.host, port=config.port, log_level="warning", access_log=False, lifespan="on"
            )
        )
        server.run()
        if not server.started:
            raise AutoRLError(f"autorl serve could not start on {config.url}; see the lines above")
