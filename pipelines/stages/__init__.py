"""The pipeline's stages: one module each, every one a `Stage`. They run in the order of
`pipelines.config.STAGES`; `STAGE_MODULES` maps each name there to its module."""

from __future__ import annotations

from typing import Any, Protocol

from autorl.task import TaskSpec

from ..config import STAGES, RunConfig
from ..stage_context import StageContext
from . import baseline, evaluate, inputs, plan, preflight, report, sft, system_prompt, train


class Stage(Protocol):
    """What a stage module defines. Its artifact is stored under `NAME` and a key made of `settings(...)`,
    the stage's code and the keys of the `UPSTREAM` stages it reads (`pipelines.staged_run.stage_keys`)."""

    NAME: str
    """The stage's name: in `STAGES`, in `--force`, and the artifact store's folder for its artifacts."""
    UPSTREAM: tuple[str, ...]
    """The stages whose artifacts it reads; a change to one of them changes this stage's key."""

    def settings(self, task: TaskSpec, config: RunConfig) -> dict[str, Any]:
        """Everything of the task and the run's config that the stage's artifact depends on."""
        ...

    def is_done(self, ctx: StageContext) -> bool:
        """Whether the stage's artifact for `ctx.keys[NAME]` is complete, so the pipeline skips `run`."""
        ...

    async def run(self, ctx: StageContext) -> dict[str, Any]:
        """Make the artifact (with `ctx.store.write(NAME, ctx.keys[NAME], ...)`) and return its summary, a JSON
        object recorded in the run's run.json."""
        ...


# A stage may also define `gate(ctx, summary)`: called after it ran or was found cached, with its summary; it
# prints what the user must see at that point and raises (an AutoRLError) to stop the run there (preflight).


_MODULES: dict[str, Stage] = {
    stage.NAME: stage for stage in (baseline, evaluate, inputs, plan, preflight, report, sft, system_prompt, train)
}
STAGE_MODULES: dict[str, Stage] = {name: _MODULES[name] for name in STAGES}
"""Every stage, by name, in the order they run."""
