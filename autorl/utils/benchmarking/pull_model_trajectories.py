"""ART's `art.utils.benchmarking.pull_model_trajectories`: a model's logged trajectories, brought to this machine."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import AutoRLError
from ..output_dirs import get_default_art_path, get_model_dir, get_trajectories_dir

if TYPE_CHECKING:
    from ...model import Model

log = logging.getLogger("autorl")


async def pull_model_trajectories(model: Model, art_path: str | None = None) -> None:
    """Copy what `model.log` recorded of `model` on the `autorl serve` it is registered with (a `RemoteBackend`)
    to `<art_path>/<project>/models/<name>/trajectories/` on this machine (`art_path`: `.autorl` in the working
    directory if None), replacing what was there, so `load_trajectories(project, art_path=...)` reads it. A model
    of a backend on this machine has its files here already: nothing is copied. (ART pulls from an S3 bucket.)"""
    backend = model._backend
    if backend is None:
        raise AutoRLError(f"model {model.name!r} is not registered; call `await model.register(backend)` first")
    if not hasattr(backend, "download_trajectories"):  # a backend on this machine writes them here
        log.info("pull_model_trajectories: model %r trains on this machine; its trajectories are here", model.name)
        return
    target = Path(get_trajectories_dir(get_model_dir(model, art_path or get_default_art_path())))
    await backend.download_trajectories(model, target)
    log.info("pulled the trajectories of %r from %s into %s", model.name, backend.url, target)
