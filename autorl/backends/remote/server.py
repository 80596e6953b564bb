"""`autorl serve`: models trained and served on this machine for programs on others (`autorl.RemoteBackend`).

`config.py` holds the command's options (`ServeConfig`) and where the token comes from; `served.py` the
models over a `LocalBackend`, `app.py` the HTTP app (FastAPI) in front of them. `serve` runs it with uvicorn
until Ctrl-C or SIGTERM, then stops the models' vLLM servers. It needs nothing of the pipeline (`pipelines`):
a home directory and its lock; `pipelines/cli.py` makes it the `autorl serve` command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...errors import AutoRLError
from ...serving.ports import bind_error
from .config import MODELS_DIR, ServeConfig, resolve_token

log = logging.getLogger("autorl")


def check_port(host: str, port: int) -> None:
    """One error line when `host:port` cannot be bound (in use, or no such interface), before vLLM or FastAPI load."""
    if (why := bind_error(host, port)) is not None:
        raise AutoRLError(f"cannot listen on {host}:{port} ({why}); choose another --port or --host")


def serve(config: ServeConfig, announce: Callable[[str], object] = print) -> None:
    """Serve until interrupted. `announce` gets the lines a user needs: the URL and where the token is (never
    the token)."""
    import uvicorn

    from ...home import exclusive
    from ..local import LocalBackend
    from .app import make_app
    from .served import ServedModels

    token, source = resolve_token(config)
    check_port(config.host, config.port)
    serve_dir = config.serve_dir()
    with exclusive(
        serve_dir / "lock", f"home {config.home}", "stop the other `autorl serve`, or choose another --home"
    ):
        backend = LocalBackend(config.home / MODELS_DIR, server=config.server, layout="run")
        served = ServedModels(backend, serve_dir, config.lease_s, config.limits)
        app = make_app(served, token, config.max_body_bytes)
        announce(f"autorl serve: {config.url} (OpenAI-compatible at {config.url}/v1); the token from {source}")
        if (warning := config.plain_http_warning()) is not None:
            announce(warning)
        server = uvicorn.Server(uvicorn.Config(app, lifespan="on", **config.uvicorn_options()))
        server.run()
        if not server.started:
            raise AutoRLError(f"autorl serve could not start on {config.url}; see the lines above")
