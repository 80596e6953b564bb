"""A model served and trained on another machine: `RemoteBackend` (client.py), the client of `autorl serve`
(server.py), and what passes between them (wire.py).

    wire.py        the requests and answers, the headers, the name checks: what both sides import
    client.py      RemoteBackend (ART's ServerlessBackend): a `Backend` over HTTP, a local copy of each model's
                   run directory with mirror=
    connection.py  its requests: retries with backoff, answers read as wire models, bounded downloads
    config.py      ServeConfig (the `autorl serve` options; light to import) and where the server's token comes from
    limits.py      ServeLimits: what clients may ask of a server; requests at once
    served.py      ServedModels: a `LocalBackend`'s models as the server holds them (registry, leases, step ids)
    app.py         the FastAPI app: the routes, the body limits, the token; openapi.py its OpenAPI description
    rollouts.py    the capture gateway's routes under each model (`autorl.capture`): agents' calls recorded by id
    server.py      serve(): the app under uvicorn, one server per home

Nothing is imported here until asked for, so the CLI reads `ServeConfig` without loading FastAPI or the client;
`RemoteBackend` and `ServerlessBackend` are reachable here too (client.py's, imported on first use).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("RemoteBackend", "ServerlessBackend"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
