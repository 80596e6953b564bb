"""A recorded run as the commands that read one see it (`autorl benchmark`, `export`, `chat`): its config,
task, stage artifacts, checkpoints and policy server (not started); `RunView.checkpoint_step` says what
`RUN@latest`, `RUN@best` and `RUN@NNNN` name."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import ValidationError

from autorl.errors import AutoRLError
from autorl.redaction import REDACTED, redacted
from autorl.task import TaskSpec, load_task
from autorl.training.checkpoints import checkpoint_name, complete_checkpoints
from pipelines.artifacts import ArtifactStore
from pipelines.config import RunConfig
from pipelines.policy import Policy
from pipelines.records import inputs, plan, system_prompt, train
from pipelines.runs import load_run
from ruler.retry import describe

CHECKPOINT_FORMS = "latest, best or a step"
"""What may follow `RUN@`."""


def split_target(target: str) -> tuple[str, str]:
    """RUN[@which] as (run name, which): `latest` when no checkpoint is named."""
    name, _, which = target.partition("@")
    if not name:
        raise AutoRLError(f"{target!r} names no run; give RUN or RUN@({CHECKPOINT_FORMS})")
    return name, which or "latest"


class RunView:
    """A recorded run, read from `<home>/runs/<name>/run.json`: its config, stage keys, and policy (not started).

    It is a `pipelines.records.run.RunArtifacts`, so the stages' readers (`inputs.load`, `system_prompt.load`,
    `train.best_step`) read its artifacts. connect=False: its policy's backend is made on first use (`Policy`), so
    reading its files joins no Ray cluster and asks no `autorl serve`; and its task keeps the MCP servers' `env`
    values redacted as run.json has them (what reads files opens no tool), so a task file moved since is no error.
    """

    def __init__(self, home: Path, name: str, calls: Counter, connect: bool = True):
        record = load_run(home, name)
        self.home, self.name, self.record, self.calls = Path(home), name, record, calls
        self.keys: dict[str, str] = record.get("keys") or {}
        if "train" not in self.keys:
            raise AutoRLError(f"run {name!r} has no stage keys in its run.json; run it with `autorl run` first")
        try:
            self.config = RunConfig.model_validate(record["config"])
        except (KeyError, ValidationError) as exc:
            raise AutoRLError(f"run {name!r}: its run.json has no valid config ({describe(exc)})") from None
        try:
            task = TaskSpec.model_validate(record["task"])
            self.task = _with_secrets(task, record.get("task_file"), name) if connect else task
        except (KeyError, ValidationError) as exc:
            raise AutoRLError(f"run {name!r}: its run.json has no valid task ({describe(exc)})") from None
        self.store = ArtifactStore(Path(home) / "artifacts")
        if plan.NAME in self.keys:  # the aids the run trained with, as its stages after the plan saw them
            self.config = plan.planned(self.config, plan.load(self))
        run_dir = Path(home) / "runs" / name
        self.policy = Policy(
            self.config, self.store.root, self.keys["train"], calls, self.task, run_dir / "logs", connect
        )

    def artifact(self, stage: str) -> Path:
        return self.store.path(stage, self.keys[stage])

    def checkpoints(self) -> list[tuple[int, Path]]:
        return complete_checkpoints(self.policy.run_dir / "checkpoints")

    def checkpoint_step(self, which: str, steps: list[int] | None = None) -> int:
        """The step `which` names (`latest`, `best`: `train.best_step`, by validation reward during training, else
        by mean training reward; or a step number) among `steps` (default: the complete checkpoints in the run
        directory; `best` is the best of them); one error line naming the checkpoints there are when it names
        none."""
        if steps is None:
            steps = [step for step, _ in self.checkpoints()]
        if not steps:
            raise AutoRLError(f"run {self.name!r} has no checkpoints yet")
        listing = ", ".join(checkpoint_name(step) for step in steps)
        if which == "latest":
            return steps[-1]
        if which == "best":
            best = train.best_step(self, among=steps)
            if best in steps:
                return best
            raise AutoRLError(f"run {self.name!r} has no trained step among {listing} to be the best: name one")
        if which.isdigit():
            if int(which) in steps:
                return int(which)
            raise AutoRLError(
                f"run {self.name!r} has no checkpoint {checkpoint_name(int(which))} (checkpoints: {listing})"
            )
        raise AutoRLError(f"{which!r} is not a checkpoint; use {CHECKPOINT_FORMS} (run {self.name!r} has {listing})")

    def checkpoint_dir(self, step: int) -> Path:
        return self.policy.run_dir / "checkpoints" / checkpoint_name(step)

    def system_prompt(self) -> str:
        try:
            return system_prompt.load(self)
        except (KeyError, FileNotFoundError):
            raise AutoRLError(
                f"run {self.name!r} has no system prompt yet (its system_prompt stage has not run)"
            ) from None

    def validation_inputs(self) -> list[str]:
        try:
            texts = inputs.load(self, "val")
        except (KeyError, FileNotFoundError):
            raise AutoRLError(
                f"run {self.name!r} has no inputs yet (its inputs stage has not run); pass --inputs FILE"
            ) from None
        if not texts:
            raise AutoRLError(f"run {self.name!r} has no validation inputs; pass --inputs FILE")
        return texts

    def train_inputs(self) -> list[str]:
        """The run's train split (what `+optimized` variants are tuned on)."""
        try:
            return inputs.load(self, "train")
        except (KeyError, FileNotFoundError):
            raise AutoRLError(f"run {self.name!r} has no inputs yet (its inputs stage has not run)") from None

    @property
    def rubric(self) -> str | None:
        return (self.record.get("task") or {}).get("rubric") or None


def _with_secrets(task: TaskSpec, task_file: str | None, name: str) -> TaskSpec:
    """`task` as run.json records it, with its MCP servers' `env` values (redacted there) read again from its task
    file; one error line when the file is gone or its servers are no longer the run's."""
    if not any(REDACTED in server.env.values() for server in task.mcp_servers):
        return task
    recorded = [server.model_dump(mode="json") for server in task.mcp_servers]
    try:
        servers = load_task(Path(task_file)).mcp_servers if task_file else None
    except AutoRLError:
        servers = None
    if servers is None or [redacted(s.model_dump(mode="json")) for s in servers] != recorded:
        raise AutoRLError(
            f"run {name!r}: run.json does not keep its MCP servers' env values, and its task file "
            f"({task_file or 'none recorded'}) is gone or no longer has the run's servers"
        )
    return task.model_copy(update={"mcp_servers": servers})
