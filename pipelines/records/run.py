"""A run's directory, `<home>/runs/<name>/`: its record (`RUN_FILE`, read by `read_record`), and what a reader of
a run's stage artifacts is given (`RunArtifacts`: a running stage's context, or a run recorded earlier)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from autorl.errors import AutoRLError

if TYPE_CHECKING:  # for annotations only: the keys of the stages reading through here do not cover the trainer's code
    from ..config import RunConfig

RUN_FILE = "run.json"


class TrainingDirectory(Protocol):
    """What the readers of a run ask of its policy (`pipelines.policy.Policy`): where it trains."""

    @property
    def run_dir(self) -> Path:
        """Where training writes checkpoints and history (the train stage's artifact directory)."""
        ...


class RunArtifacts(Protocol):
    """What the readers of artifacts (`inputs.load`, `system_prompt.load`, `train.best_step`, ...) use: a
    `StageContext`, or a run recorded earlier (`autorl benchmark` reads runs this way: `RunView`)."""

    @property
    def config(self) -> RunConfig: ...

    @property
    def policy(self) -> TrainingDirectory: ...

    def artifact(self, stage: str) -> Path:
        """The directory of a stage's artifact."""
        ...


def read_record(path: Path) -> dict[str, Any]:
    """A run record (run.json) as a dict; one `AutoRLError` line naming the file when it is damaged (cut short,
    binary, not a run's record)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AutoRLError(f"run record {path} cannot be read ({exc.strerror})") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        record, why = None, f"not JSON: {str(exc).splitlines()[0]}"
    else:
        why = "not a run's record"
    if not isinstance(record, dict) or not isinstance(record.get("task"), dict):
        raise AutoRLError(f"run record {path} is damaged ({why}); remove it, and the same command writes a new one")
    return record
