"""Where a `TrainableModel` is served and trained: the `Backend` interface (base.py) and its implementations,
`LocalBackend` (this machine, local.py), `ClusterBackend` (a Ray cluster, cluster/) and `RemoteBackend` (a client
of `autorl serve` on another machine, remote/: its client, wire format and server). `make_backend` picks
one from the configs. Nothing but the errors is imported here, so `autorl.backends.cluster.config` loads without the
server's process code or Ray."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AutoRLError

if TYPE_CHECKING:
    from ..serving.config import ServerConfig
    from .base import Backend
    from .cluster.config import ClusterConfig


def make_backend(
    path: str | os.PathLike, server: ServerConfig, cluster: ClusterConfig, remote: str | None = None
) -> Backend:
    """A `RemoteBackend` when `remote` is the URL of an `autorl serve` (its run directories copied under `path`;
    the `server` fields set, but where it runs, asked of it for each model, with adapter serving; one client id
    per machine and `path`, so a rerun is the client that trained before), a `ClusterBackend` when
    `cluster.ray` names a cluster, else a `LocalBackend` (both under `path`, in `autorl run`'s layout:
    `path/<project>/<name>/`)."""
    if remote is not None:
        if cluster.ray is not None:
            raise AutoRLError(
                "a Ray cluster (cluster.ray) and an `autorl serve` (remote) are two places to train: give one"
            )
        from .remote.client import RemoteBackend
        from .remote.wire import CLIENT_SET

        if server.lora_serving == "merged":
            raise AutoRLError(
                "a run on an `autorl serve` (--backend) serves earlier checkpoints too (the baseline, the best "
                "step): use lora_serving adapter, not merged"
            )
        asked = {**server.model_dump(exclude_unset=True, exclude=set(CLIENT_SET)), "lora_serving": "adapter"}
        client = hashlib.sha256(f"{socket.gethostname()}:{Path(path).resolve()}".encode()).hexdigest()[:32]
        return RemoteBackend(remote, mirror=path, server=asked, client_id=client)
    if cluster.ray is None:
        from .local import LocalBackend

        return LocalBackend(path, server=server, layout="run")
    from .cluster.backend import ClusterBackend  # Ray and the actors load only for a cluster run

    return ClusterBackend(path, cluster=cluster, server=server, layout="run")
