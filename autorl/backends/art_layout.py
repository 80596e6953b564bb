"""What ART's on-disk layout asks of a `ModelBackend` beyond the directory's place (`autorl.utils.output_dirs`):
checkpoint `0000` at registration, and moving a model's directory from autorl's earlier layout into ART's."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..atomic import atomic_dir
from ..training.checkpoints import checkpoint_name

log = logging.getLogger("autorl")
BASE_CHECKPOINT_FILE = "base_model.json"
"""What checkpoint `0000` holds: the base model's name. It is the base model (a LoRA not yet trained changes
nothing), served under the base model's own name; `autorl.training.checkpoints.complete_checkpoints` lists only
trained checkpoints, so it is never the one training resumes from, nor one that retention deletes."""


def write_base_checkpoint(run_dir: Path, base_model: str) -> None:
    """Write checkpoint `0000` if the model has no checkpoint directory yet (ART writes its untrained LoRA there
    when a model is first registered)."""
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir()):
        return
    checkpoints.mkdir(parents=True, exist_ok=True)
    with atomic_dir(checkpoints / checkpoint_name(0)) as tmp:
        (tmp / BASE_CHECKPOINT_FILE).write_text(json.dumps({"step": 0, "base_model": base_model}) + "\n")


def migrate(old: Path, new: Path) -> None:
    """Move a model's directory of autorl's earlier layout (`<path>/<project>/<name>/`) to ART's
    (`<path>/<project>/models/<name>/`) when only the old one exists; one warning line says so."""
    if new.exists() or old in new.parents or not ((old / "checkpoints").is_dir() or (old / "history.jsonl").is_file()):
        return
    new.parent.mkdir(parents=True, exist_ok=True)
    os.replace(old, new)
    log.warning("moved model directory %s to %s (ART's layout: <path>/<project>/models/<name>)", old, new)
