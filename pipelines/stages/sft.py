"""Stage `sft`: a supervised warm-up of the policy's LoRA on a JSONL file of conversations (`--sft-file`) before RL.

The file is ART's SFT format (`autorl.utils.sft.iterate_file`: a `{"messages": [...], "tools": [...]}` object a
line); it is cut into model steps as ART's `create_sft_dataset_iterator` cuts it for `model.train_sft`: batches
of `batch_size` conversations over `epochs`, one learning-rate schedule over all of them, `chunk_size` batches a
step. Each step is a checkpoint and a history line (`sft: 1`, its loss and learning rate) in the stage's own
training directory, trained on this machine without a server; a killed warm-up resumes after its newest
checkpoint. The stage's key covers the file's content (not its path), the base model and the LoRA's settings;
the train stage starts from its last checkpoint, so ART's step numbering holds: the warm-up's steps are the
model's first steps, RL's first step is the one after them (`first_rl_step`).
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from autorl.atomic import atomic_text, private_dir
from autorl.backends.local import ThreadTrainer
from autorl.backends.run_dir import append_history, read_history, reconcile_history
from autorl.errors import AutoRLError
from autorl.serving.embedded import resolve_base_model
from autorl.task import TaskSpec
from autorl.training.checkpoints import checkpoint_name, latest_checkpoint
from autorl.trajectories import Trajectory
from autorl.utils.sft import SFTChunk, create_sft_dataset_iterator, iterate_file

from ..artifacts import MANIFEST, canonical_json
from ..config import RunConfig
from ..records.sft import NAME
from ..records.step_costs import STEP_COST
from ..stage_context import StageContext

UPSTREAM: tuple[str, ...] = ()


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    """What the warm-up's checkpoints depend on: the file's content, its settings, the base model, the LoRA and
    the seed (the batches' shuffle); nothing when there is no file."""
    if config.sft.file is None:
        return {"file": None}
    return {
        "file_sha256": file_digest(config.sft.file),
        "sft": config.sft.model_dump(mode="json", exclude={"file"}),
        "model": config.model,
        "trainer": config.trainer.model_dump(),
        "seed": config.seed,
    }


def file_digest(path: Path) -> str:
    """The SHA-256 of the file's bytes; one `AutoRLError` line when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        raise AutoRLError(f"--sft-file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise AutoRLError(f"--sft-file {str(path)!r} cannot be read ({exc.strerror})") from None


def conversations(path: Path) -> list[Trajectory]:
    """The file's conversations, in its order; one `AutoRLError` line naming the file (and the line) when one is
    not a `{"messages": [...]}` object, has no assistant turn to learn from, or there are none."""
    found = list(iterate_file(path, shuffle_buffer_size=1))  # 1: the file's order, so that a number names a line
    if not found:
        raise AutoRLError(f'--sft-file {str(path)!r} has no conversations (a JSONL file of {{"messages": [...]}})')
    for number, trajectory in enumerate(found, 1):
        if not any(message.get("role") == "assistant" for message in trajectory.messages()):
            raise AutoRLError(
                f"--sft-file {str(path)!r}: conversation {number} has no assistant turn (nothing to learn from it)"
            )
    return found


def check_file(config: RunConfig) -> None:
    """Read the SFT file as the stage will, so that a bad one is one line before anything starts."""
    if config.sft.file is None:
        return
    if config.backend is not None:  # its training directory is the server's: a checkpoint made here stays here
        raise AutoRLError(
            "--sft-file with --backend: not supported; warm up with model.train_sft on the server's model"
        )
    conversations(config.sft.file)


def chunks(config: RunConfig, found: list[Trajectory]) -> list[SFTChunk]:
    """The warm-up's model steps, each a chunk of batches with its learning rates (ART's iterator)."""
    s = config.sft
    return list(
        create_sft_dataset_iterator(
            found, chunk_size=s.chunk_size, epochs=s.epochs, batch_size=s.batch_size, peak_lr=s.peak_lr,
            seed=config.seed, show_progress=False,
        )
    )  # fmt: skip


def skipped(config: RunConfig) -> str | None:
    """Why the stage has nothing to do (no file), or None."""
    return None if config.sft.file is not None else "no --sft-file"


def is_done(ctx: StageContext) -> bool:
    return skipped(ctx.config) is not None or ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    config, work = ctx.config, ctx.artifact(NAME)
    found = conversations(config.sft.file)
    steps = chunks(config, found)
    private_dir(work / "checkpoints")
    reconcile_history(work)  # killed between a step's checkpoint and its history line: the line comes back
    latest = latest_checkpoint(work / "checkpoints")
    done = latest[0] if latest else 0
    with ThreadPoolExecutor(1, "autorl-torch-sft") as thread:  # torch on one thread, as the policy's trainer
        trainer = ThreadTrainer(resolve_base_model(config.model), work / "checkpoints", config.trainer, thread)
        try:
            for step, chunk in enumerate(steps[done:], done + 1):
                started = time.monotonic()
                metrics = await trainer.sft(chunk.trajectories, chunk.config, step)
                append_history(work, {"step": step, **metrics})
                cost = {"seconds": round(time.monotonic() - started, 2), "model_calls": {}}
                (work / "steps" / checkpoint_name(step)).mkdir(parents=True, exist_ok=True)
                atomic_text(work / "steps" / checkpoint_name(step) / STEP_COST, canonical_json(cost))
                ctx.tracker.log(metrics, step)
                ctx.console.print(
                    f"sft step {step}/{len(steps)}  loss {metrics['loss']:.4f}  learning rate "
                    f"{metrics['learning_rate']:.2e}  conversations {len(chunk.trajectories)}"
                )
        finally:
            trainer.close()
    history = read_history(work)[: len(steps)]
    summary = {
        "steps": len(steps),
        "conversations": len(found),
        "epochs": config.sft.epochs,
        "file": str(config.sft.file),
        "final_loss": history[-1]["loss"] if history else None,
    }
    atomic_text(work / MANIFEST, canonical_json({"stage": NAME, "key": ctx.keys[NAME], **summary}))
    return summary
