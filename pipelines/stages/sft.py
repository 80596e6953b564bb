"""Stage `sft`: a supervised warm-up of the policy's LoRA before RL, on a JSONL file of conversations
(`--sft-file`) or on the policy's own best answers (`--sft-bootstrap N`).

The file is ART's SFT format (`autorl.utils.sft.iterate_file`: a `{"messages": [...], "tools": [...]}` object a
line); it is cut into model steps as ART's `create_sft_dataset_iterator` cuts it for `model.train_sft`: batches
of `batch_size` conversations over `epochs`, one learning-rate schedule over all of them, `chunk_size` batches a
step. Each step is a checkpoint and a history line (`sft: 1`, its loss and learning rate) in the stage's own
training directory, trained on this machine without a server; a killed warm-up resumes after its newest
checkpoint. The stage's key covers the file's content (not its path), the base model and the LoRA's settings;
the train stage starts from its last checkpoint, so ART's step numbering holds: the warm-up's steps are the
model's first steps, RL's first step is the one after them (`first_rl_step`).

The bootstrap warm-up is rejection sampling, zero data: the base policy answers `N` training inputs
(`group_size` answers each, under the run's system prompt), the run's judge scores each group, and each group's
best answer scoring at least `min_reward` becomes a conversation (`SAMPLES_FILE`, the record of what was kept).
A held-out input is never answered. A model judge that its audit does not find reliable on these groups gives
no warm-up (training on its scores would train on noise); nor does a judge that scores no answer high enough:
RL then starts from the base, and the run says why. Its groups are saved as they are judged, so a killed
warm-up resumes without asking again. The stage reads the inputs and the system prompt, so a file warm-up is
re-keyed by them too.
"""

from __future__ import annotations

import hashlib
import json
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
from autorl.trajectories import Trajectory, TrajectoryGroup
from autorl.utils.sft import SFTChunk, create_sft_dataset_iterator, iterate_file
from ruler.audit import reads_rubric

from ..artifacts import MANIFEST, canonical_json
from ..config import RunConfig
from ..records import inputs, system_prompt
from ..records.sft import NAME, skipped
from ..records.step_costs import STEP_COST
from ..stage_context import StageContext
from ..steps.groups import group_settings, judge_audit, judged_groups, unreliable

UPSTREAM = ("inputs", "system_prompt", "plan")  # what the bootstrap warm-up answers, under which prompt and plan
SAMPLES_FILE = "bootstrap.jsonl"
"""The bootstrap warm-up's conversations, in ART's SFT format: what it kept of the policy's answers."""
FOUND_FILE = "bootstrap.json"
"""What the bootstrap's sampling found (`bootstrapped`), written with `SAMPLES_FILE`."""


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    """What the warm-up's checkpoints depend on: the file's content (or, bootstrapping, how answers are sampled
    and judged), its settings, the base model, the LoRA and the seed (the batches' shuffle); nothing when there
    is no warm-up."""
    if skipped(config):
        return {"file": None}
    common = {
        "sft": config.sft.model_dump(mode="json", exclude={"file"}),
        "model": config.model,
        "trainer": config.trainer.model_dump(),
        "seed": config.seed,
    }
    if config.sft.file is not None:
        return {"file_sha256": file_digest(config.sft.file), **common}
    return {**common, **group_settings(task, config)}  # the bootstrap samples and judges as a training step does


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
    if config.sft.file is None and not config.sft.bootstrap:  # none given (with --backend, `run` plans none)
        return
    if config.backend is not None:  # its training directory is the server's: a checkpoint made here stays here
        flag = "--sft-file" if config.sft.file is not None else "--sft-bootstrap"
        raise AutoRLError(f"{flag} with --backend: not supported; warm up with model.train_sft on the server's model")
    if config.sft.file is not None:
        conversations(config.sft.file)


async def bootstrapped(ctx: StageContext, work: Path) -> tuple[list[Trajectory], dict[str, Any]]:
    """The bootstrap warm-up's conversations (the module's docstring says how they are chosen) and what the
    sampling found: `answered`, `kept`, and `why` where nothing is kept for a reason other than the scores."""
    config, kept_file = ctx.config, work / SAMPLES_FILE
    if kept_file.is_file():  # sampled before a kill: the same conversations
        kept = list(iterate_file(kept_file, shuffle_buffer_size=1)) if kept_file.stat().st_size else []
        return kept, json.loads((work / FOUND_FILE).read_text())
    train_texts = inputs.load(ctx, "train")
    texts = [train_texts[i % len(train_texts)] for i in range(config.sft.bootstrap)]
    saved = [work / "samples" / f"group_{i:03d}.json" for i in range(len(texts))]
    saved[0].parent.mkdir(parents=True, exist_ok=True)
    groups = await judged_groups(ctx, system_prompt.load(ctx), texts, saved, "warm-up samples")
    found: dict[str, Any] = {"answered": len(groups) * config.group_size, "groups": len(groups)}
    if not groups:
        why = "the judge scored no group"
    elif reads_rubric(ctx.judge):
        why = unreliable(await judge_audit(ctx, groups, earlier=system_prompt.check_audit(ctx)))
    else:
        why = None
    kept = [] if why else best_answers(groups, config.sft.min_reward)
    found |= {"kept": len(kept)} | ({"why": why} if why else {})
    atomic_text(work / FOUND_FILE, canonical_json(found))
    atomic_text(kept_file, "".join(json.dumps({"messages": t.messages(), "tools": t.tools}) + "\n" for t in kept))
    return kept, found


def best_answers(groups: list[TrajectoryGroup], min_reward: float) -> list[Trajectory]:
    """Each group's best answer (the first of the best on a tie) that scored at least `min_reward`, as a
    conversation: its messages (the system prompt, the input, every turn) and tools."""
    kept = []
    for group in groups:
        best = max(group.trajectories, key=lambda t: t.reward)
        if best.reward >= min_reward:
            kept.append(Trajectory(messages_and_choices=best.messages(), tools=best.tools))
    return kept


def chunks(config: RunConfig, found: list[Trajectory]) -> list[SFTChunk]:
    """The warm-up's model steps, each a chunk of batches with its learning rates (ART's iterator)."""
    s = config.sft
    return list(
        create_sft_dataset_iterator(
            found, chunk_size=s.chunk_size, epochs=s.epochs, batch_size=s.batch_size, peak_lr=s.peak_lr,
            seed=config.seed, show_progress=False,
        )
    )  # fmt: skip


def is_done(ctx: StageContext) -> bool:
    return skipped(ctx.config) is not None or ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    config, work = ctx.config, ctx.artifact(NAME)
    private_dir(work / "checkpoints")
    if config.sft.file is None and (not config.sft.bootstrap or config.backend is not None):  # none given
        why = "the plan called for none" if not config.sft.bootstrap else "the server trains (--backend): none"
        ctx.console.print(f"warm-up: {why}")
        summary = {"steps": 0, "conversations": 0, "none": why}
        atomic_text(work / MANIFEST, canonical_json({"stage": NAME, "key": ctx.keys[NAME], **summary}))
        return summary
    sampling: dict[str, Any] = {}
    if config.sft.file is not None:
        found = conversations(config.sft.file)
    else:
        found, sampling = await bootstrapped(ctx, work)
        said = sampling.get("why") or f"scored at least {config.sft.min_reward}"
        ctx.console.print(f"warm-up: kept {len(found)} of {sampling['groups']} groups' best answers ({said})")
    steps = chunks(config, found) if found else []
    reconcile_history(work)  # killed between a step's checkpoint and its history line: the line comes back
    latest = latest_checkpoint(work / "checkpoints")
    if len(steps) > (done := latest[0] if latest else 0):
        await _train(ctx, work, steps, done)
    history = read_history(work)[: len(steps)]
    summary = {
        "steps": len(steps),
        "conversations": len(found),
        "epochs": config.sft.epochs,
        "file": str(config.sft.file) if config.sft.file is not None else SAMPLES_FILE,
        "final_loss": history[-1]["loss"] if history else None,
        **({"bootstrap": sampling} if sampling else {}),
    }
    atomic_text(work / MANIFEST, canonical_json({"stage": NAME, "key": ctx.keys[NAME], **summary}))
    return summary


async def _train(ctx: StageContext, work: Path, steps: list[SFTChunk], done: int) -> None:
    """The warm-up's steps after the `done` ones: each a checkpoint, a history line and its cost."""
    with ThreadPoolExecutor(1, "autorl-torch-sft") as thread:  # torch on one thread, as the policy's trainer
        model_dir, longest = resolve_base_model(ctx.config.model), ctx.config.server.max_model_len
        trainer = ThreadTrainer(model_dir, work / "checkpoints", ctx.config.trainer, thread, longest)
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
