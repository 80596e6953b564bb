"""What a `PipelineTrainer` has taken, dropped and trained (`PipelineState`), saved in the model's run
directory after every step (`STATE_FILE`) so that a resumed run skips the scenarios it took and counts on.
Apart from `pipeline_trainer` so the stages there read on their own."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

STATE_FILE = "pipeline_state.json"
"""The pipeline's state in the model's run directory, written after every step (`PipelineState`)."""


@dataclass
class PipelineState:
    """What the pipeline has taken, dropped and trained; saved after every step so that a resumed run continues."""

    scenario_offset: int = 0
    """Scenarios taken from the iterator so far (a resumed run skips them)."""
    stale_groups: int = 0
    """Groups dropped because they were sampled more than `max_steps_off_policy` versions before the policy trained."""
    tied_groups: int = 0
    """Groups dropped because their rewards tied (zero variance: no learning signal)."""
    failed_groups: int = 0
    """Groups dropped because none of their rollouts gave a trajectory (each raised, or the judge failed)."""
    trained_groups: int = 0
    """Groups trained on."""
    staleness: dict[int, int] = field(default_factory=dict)
    """Trained groups by staleness: the policy versions between the oldest that sampled a group and the one trained."""
    evaluated_steps: list[int] = field(default_factory=list)
    """Steps whose evaluation ran."""

    @classmethod
    def read(cls, path: Path) -> PipelineState:
        if not path.is_file():
            return cls()
        data = json.loads(path.read_text())
        data["staleness"] = {int(k): v for k, v in data.get("staleness", {}).items()}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
