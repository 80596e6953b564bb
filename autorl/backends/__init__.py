"""Where a `TrainableModel` is served and trained: the `Backend` interface (base.py) and its implementations,
`LocalBackend` (this machine, local.py), `ClusterBackend` (a Ray cluster, cluster/) and `RemoteBackend` (a client
of `autorl serve` on another machine, remote.py). `make_backend` picks
one from the configs. Nothing is imported here, so `autorl.backends.cluster.config` loads without the
server's process code or Ray."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..serving.config import ServerConfig
    from .base import ModelBackend
    from .cluster.config import ClusterConfig


def make_backend(path: str | os.PathLike, server: ServerConfig, cluster: ClusterConfig) -> ModelBackend:
    """A `ClusterBackend` when `cluster.ray` names a cluster, else a `LocalBackend`."""
    if cluster.ray is None:
        from .local import LocalBackend

        return LocalBackend(path, server=server)
    from .cluster.backend import ClusterBackend  # Ray and the actors load only for a cluster run

    return ClusterBackend(path, cluster=cluster, server=server)
