"""The content-addressed artifact store of the pipeline.

A stage's key is the hash of its name, its configuration, the source of its module (its code
version) and the keys of the artifacts it reads. Its artifact is a directory
`<home>/artifacts/<stage>/<key>/`, written in a temporary directory and renamed into place, so it is
either complete or absent: a crash or a full disk mid-write leaves the previous artifact valid.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from autorl.errors import AutoRLError

MANIFEST = "artifact.json"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def code_version(module: ModuleType) -> str:
    """A hash of a stage module's source: editing the stage invalidates its artifacts."""
    return hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()[:16]


def stage_key(stage: str, config: dict[str, Any], code: str, upstream: dict[str, str]) -> str:
    payload = {"stage": stage, "config": config, "code": code, "upstream": upstream}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:20]


class ArtifactStore:
    """Artifacts under `root/<stage>/<key>/`, each with a manifest written last."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def exists(self, stage: str, key: str) -> bool:
        return (self.path(stage, key) / MANIFEST).is_file()

    def manifest(self, stage: str, key: str) -> dict[str, Any]:
        return json.loads((self.path(stage, key) / MANIFEST).read_text())

    @contextmanager
    def write(self, stage: str, key: str, meta: dict[str, Any]) -> Iterator[Path]:
        """Yield a temporary directory to fill; on success it becomes the artifact, atomically."""
        target = self.path(stage, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=target.parent))
        try:
            yield tmp
            (tmp / MANIFEST).write_text(canonical_json({"stage": stage, "key": key, "created": time.time(), **meta}))
            if target.exists():  # replaced by --force
                shutil.rmtree(target)
            os.replace(tmp, target)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise AutoRLError(f"disk full while writing the {stage} artifact; the previous one is untouched") from None
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remove(self, stage: str, key: str) -> None:
        shutil.rmtree(self.path(stage, key), ignore_errors=True)


def write_json(path: Path, value: Any) -> None:
    """Write JSON atomically (temp file + rename), for files updated in place."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, default=str))
    os.replace(tmp, path)


def atomic_file(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` and rename the result onto `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
