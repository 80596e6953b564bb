"""The on-disk judge cache: one JSON file per judge request, keyed by a hash of everything the answer depends on.

The key hashes the judge's identity (model, sampling settings and a `name@URL` judge's host, port and path; never
credentials: `JudgeModel.identity`), the prompt
messages (which contain the rubric, the tools and the trajectories) and the answer schema. Files are
written to a temporary name and renamed into place, so a killed run never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from .prompt import canonical_json

log = logging.getLogger("ruler")

CacheDir = str | os.PathLike[str] | Literal["auto"] | None
"""Where the judge cache lives: a directory, "auto" (`default_cache_dir()`), or None for no cache."""


def default_cache_dir() -> Path:
    """`$AUTORL_HOME/cache/ruler` when AUTORL_HOME is set, else `./.autorl/cache/ruler`."""
    home = os.environ.get("AUTORL_HOME")
    return (Path(home) if home else Path(".autorl")) / "cache" / "ruler"


def cache_key(payload: dict[str, Any]) -> str:
    """The SHA-256 of `payload`'s canonical JSON."""
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


class JudgeCache:
    """Judge answers stored as `<dir>/<key[:2]>/<key>.json`."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)

    @classmethod
    def from_setting(cls, setting: CacheDir) -> JudgeCache | None:
        if setting is None:
            return None
        return cls(default_cache_dir() if setting == "auto" else setting)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or None when absent or unreadable (then it is recomputed and overwritten)."""
        path = self._path(key)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable judge cache entry %s: %s", path, exc)
            return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as file:
                json.dump(entry, file, ensure_ascii=False, indent=1)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
