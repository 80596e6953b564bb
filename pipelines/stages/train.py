"""Stage `train`: GRPO steps until `steps` checkpoints exist.

Per step: the policy answers the step's training inputs `group_size` times each, the judge scores each group
as soon as its answers are in (each scored group is saved at once), and while too few groups differ in score
the step draws more inputs (dynamic sampling: `pipelines.steps.groups`, `pipelines.sampling`); then one GRPO update
writes checkpoint NNNN, its history line and what the step took (`STEP_COST`); every `validate_every` steps the
newest checkpoint is validated on held-out inputs (`pipelines.steps.validation`: the best checkpoint), and the
checkpoints that `keep_checkpoints` leaves out are deleted (the newest stays, and so does the best when it is
kept: the one `best_step` names). The stage's artifact directory is the training directory itself
(checkpoints/, history.jsonl, log_history.jsonl, steps/, trajectories/, logs/); its manifest is written when
the asked-for steps exist, or when training ended before them (without `--steps`, once validation stopped
improving: `RunConfig.patience`; or by the sentinel), and a later run asking for more steps continues it. A killed run resumes after the
newest checkpoint and reuses the scored groups of the step it was in.

After each step the reward-hacking sentinel reads the history (`pipelines.sentinel`); when it fires, the
run acts as `--on-drift` says (`pipelines.steps.on_drift.act_on_drift`): warn, stop, or roll back to an earlier
checkpoint with a stronger KL penalty and train those steps again (its rollbacks spent, training ends there). Its actions are recorded in
`pipelines.records.train.SENTINEL_ACTIONS`; what each step took in `pipelines.records.step_costs`. What a step
does once its update is written, the synchronous loop and `--async` alike, is `pipelines.steps.bookkeeping`.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

from autorl import tracing
from autorl.atomic import atomic_dir, atomic_text
from autorl.backends.run_dir import ensure_writable, read_history, save_trajectories, write_history
from autorl.config import ART_TRAIN_SETTINGS, TrainConfig
from autorl.pipeline_trainer import PipelineTrainer
from autorl.task import TaskSpec
from autorl.training.checkpoints import checkpoint_name
from autorl.trajectories import TrajectoryGroup
from ruler.audit import reads_rubric

from ..artifacts import MANIFEST, canonical_json
from ..config import RunConfig
from ..records import inputs, preflight, sft, system_prompt
from ..records.run import RunArtifacts
from ..records.step_costs import STEP_COST, group_cost
from ..records.train import (
    NAME,
    best_step,
    flattened,
    last_step,
    rl_history,
    sentinel_actions,
    steps_done,
    stopped_by_curve,
    stops_by_curve,
    validated_steps,
)
from ..sampling import InputQueue
from ..stage_context import StageContext
from ..steps.bookkeeping import StepStart, Watch, close_step
from ..steps.groups import group_settings, sampled_groups
from ..steps.on_drift import TRAINING_ENDS, act_on_drift, adjusted_config, training_ended
from ..steps.validation import due, validate, validation_texts

UPSTREAM = ("inputs", "system_prompt", "plan", "sft", "baseline")  # validation judges beside the base answers


def step_config(config: RunConfig) -> TrainConfig:
    """The `TrainConfig` each GRPO step of the run gets: the run's, its overlong penalty counting up to the
    rollouts' max_tokens unless set."""
    if config.train.max_completion_tokens is not None:
        return config.train
    return config.train.model_copy(update={"max_completion_tokens": config.rollout.max_tokens})


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    """Every setting training reads; `steps` is left out: asking for more steps continues the same training."""
    return {
        **group_settings(task, config),
        "train": config.train.model_dump(exclude=keyed_when_set(config.train)),
        "trainer": config.trainer.model_dump(),  # the LoRA and trainer settings of `Policy`'s model
        # the inputs it trains on, when the learnability check may drop some
        **({} if config.preflight == "off" or config.on_tied == "warn" else {"on_tied": config.on_tied}),
        "sentinel": config.sentinel.model_dump(),  # a rollback changes what training makes
        **({"max_steps_off_policy": config.max_steps_off_policy} if config.max_steps_off_policy else {}),
        "dynamic_sampling": config.dynamic_sampling,  # which inputs a step draws
        "tie_search": config.tie_search,  # how many answers to a tied one
        # which checkpoint is the best (retention may keep only it)
        **({"validate": [config.validate_every, config.validation_inputs]} if config.validate_every else {}),
    }


KEYED_WHEN_SET = ("importance_sampling_correction", "importance_sampling_cap", "tie_spread", *ART_TRAIN_SETTINGS)
"""`TrainConfig` fields added after runs were cached: in the train key only away from their defaults, so the runs
cached before them keep their keys."""


def keyed_when_set(train: TrainConfig) -> set[str]:
    """The fields of `KEYED_WHEN_SET` that `train` leaves at their defaults (left out of the key)."""
    return {name for name in KEYED_WHEN_SET if getattr(train, name) == TrainConfig.model_fields[name].default}


def is_done(ctx: StageContext) -> bool:
    """Whether the artifact exists and has its last checkpoint, or training ended before it: by the curve (where
    the run may stop by it) or by the sentinel. Asking for more steps continues a training stopped by the curve."""
    if not ctx.has_artifact(NAME):
        return False
    work = ctx.policy.run_dir
    return (
        steps_done(ctx) >= last_step(ctx)
        or (stops_by_curve(ctx.config) and stopped_by_curve(work))
        or training_ended(work)  # by the sentinel: the same command would drift there again
    )


def start_from_sft(ctx: StageContext) -> None:
    """Make the SFT warm-up's last checkpoint the training directory's newest, with the warm-up's history lines
    and step costs before RL's (a training directory with a checkpoint already has them). Written history first,
    checkpoint last: a crash in between leaves no checkpoint, and the next run writes both again."""
    first, work = sft.first_rl_step(ctx), ctx.policy.run_dir
    if first == 1 or steps_done(ctx) > 0:
        return
    ensure_writable(work)
    warm_up = ctx.artifact(sft.NAME)
    records = read_history(warm_up)[: first - 1]
    write_history(work, records)
    for step in range(1, first):
        cost = warm_up / "steps" / checkpoint_name(step) / STEP_COST
        if cost.is_file():  # not for a step killed before its cost was written: its cost is then unknown
            (work / "steps" / checkpoint_name(step)).mkdir(parents=True, exist_ok=True)
            atomic_text(work / "steps" / checkpoint_name(step) / STEP_COST, cost.read_text())
    with atomic_dir(work / "checkpoints" / checkpoint_name(first - 1)) as tmp:
        shutil.copytree(warm_up / "checkpoints" / checkpoint_name(first - 1), tmp, dirs_exist_ok=True)


async def run(ctx: StageContext) -> dict[str, Any]:
    config, work = ctx.config, ctx.policy.run_dir
    prompt = system_prompt.load(ctx)
    train_inputs = training_inputs(ctx)
    await ctx.policy.start()  # from here a remote backend's copy of the run directory is the server's
    start_from_sft(ctx)
    step, first, last = steps_done(ctx), sft.first_rl_step(ctx), last_step(ctx)
    # the newest checkpoint, whatever an earlier stage served (with merged serving the server holds one: the
    # baseline and the preflight stage answer with the base model's weights)
    await ctx.policy.serve_step(step)
    noise, extend = judge_noise(ctx)
    if config.max_steps_off_policy:
        step = await train_pipelined(ctx, prompt, train_inputs, step, last, noise)
    watch = Watch(work)

    def settings_from(after: int) -> tuple[TrainConfig, InputQueue]:
        """The update's settings and the inputs queue for the steps after step `after`."""
        queue = InputQueue.rebuilt(train_inputs, work / "steps", first, after + 1, config.groups_per_step)
        return update_settings(config, work, noise), queue

    train_config, queue = settings_from(step)
    rl_steps = last - first + 1
    resumed = step >= first and not config.max_steps_off_policy  # `--async` validates nothing (docs/async.md)
    if resumed and due(config, step - first + 1, rl_steps, extend) and step not in validated_steps(work):
        await validate(ctx, prompt, step)  # a run killed between a step's update and its validation

    ended = training_ended(work)  # the sentinel ended training (also by `--async`, or before a kill)

    async def on_drift(warning: str) -> None:
        nonlocal step, train_config, queue, ended
        restored = await act_on_drift(ctx, warning, step, train_config)
        if restored == TRAINING_ENDS:
            ended = True
        elif restored is None:
            watch.warned = True
        else:  # trained on from the restored checkpoint, under the settings the rollback set
            step = restored
            watch.restored(restored)
            train_config, queue = settings_from(step)

    # the best step, once validation stopped improving (`RunConfig.patience`; also a run killed right after)
    flat = flattened(work, config.patience) if stops_by_curve(config) else None
    while step < last and flat is None and not ended:
        step += 1
        step_dir = work / "steps" / checkpoint_name(step)
        step_dir.mkdir(parents=True, exist_ok=True)
        start = StepStart.now(ctx)
        step_span = tracing.begin("autorl.step", {"autorl.step": step})  # rollouts, judging and update under it
        made_earlier = [cost for path in sorted(step_dir.glob("group_*.json")) if (cost := group_cost(path))]
        desc, rl_step = f"step {step}/{last}", step - first + 1
        groups, drawn = await sampled_groups(
            ctx, prompt, queue, rl_step, step_dir, desc, train_config.tie_spread, extend
        )  # groups tied for the update are tied for the sampling too
        if not groups:
            ctx.console.print(
                f"[yellow]step {step}: no group could be scored ({len(drawn)} dropped: the judge failed on each, "
                "see the warnings above); this step trains nothing[/yellow]"
            )
        metrics = await ctx.policy.model.train(groups, config=train_config)  # the backend traces it: `autorl.update`
        save_trajectories(work / "trajectories" / f"{checkpoint_name(step)}.parquet", groups, step)
        if due(config, rl_step, rl_steps, extend) and (value := await validate(ctx, prompt, step)) is not None:
            ctx.console.print(
                f"step {step}: validation {value:.3f} on {len(validation_texts(ctx))} held-out inputs "
                f"(best so far: step {best_step(ctx, step)})",
                highlight=False,
            )
            if stops_by_curve(config) and (flat := flattened(work, config.patience)) is not None:
                ctx.console.print(
                    f"step {step}: validation has not beaten step {flat}'s for {config.patience} validations, so "
                    f"training stops here, before step {last} (--patience; --steps N trains a fixed budget)",
                    highlight=False,
                )
        drift = f"  kl to base {metrics['kl_to_base']:.3f}" if "kl_to_base" in metrics else ""
        said = f"groups trained {metrics['groups_trained']}/{metrics['groups']}{drift}"
        try:
            await close_step(
                ctx, step, last, metrics, start, said, watch, on_drift,
                made_earlier=made_earlier, logged={"inputs_drawn": len(drawn)},  # dynamic sampling
            )  # fmt: skip
        finally:
            step_span.end()
    history = rl_history(read_history(work)[:last])
    summary = {"steps": step, "final_reward": history[-1]["reward"] if history else None}
    if flat is not None:
        summary["stopped_by_curve"] = {"step": step, "best": flat}
    if ended:
        summary["ended_by_sentinel"] = step
    if first > 1:
        summary["sft_steps"] = first - 1
    atomic_text(work / MANIFEST, canonical_json({"stage": NAME, "key": ctx.keys[NAME], **summary}))
    return summary


def update_settings(config: RunConfig, work: Path, noise: float) -> TrainConfig:
    """The update's settings: those the newest rollback set (`adjusted_config`), with the judge's noise floor
    `noise` as the tie spread where it is larger than `--tie-spread` (both loops)."""
    train = adjusted_config(step_config(config), sentinel_actions(work))
    return train.model_copy(update={"tie_spread": max(train.tie_spread, noise)})


async def train_pipelined(
    ctx: StageContext, prompt: str, train_inputs: list[str], step: int, last: int, noise: float
) -> int:
    """`--async N`: the steps from `step` up to `last` by `autorl.PipelineTrainer`, at most N policy versions
    off-policy: `2 x groups_per_step` groups are answered and judged at a time, with the newest checkpoint served,
    and each step trains the first `groups_per_step` usable groups (stale and tied ones are dropped and counted in
    the step's metrics). Per step, as the synchronous loop (`pipelines.steps.bookkeeping.close_step`): its
    trajectories, the checkpoints kept, `STEP_COST` (here the wall time and model calls since the previous step
    ended, groups still in flight included), its metrics and line, the sentinel, the budget, and its `autorl.step`
    span (the pipeline's, given the step's cost here) with the `autorl.update` span under it; its rollouts' spans
    sit under the stage's. When the sentinel fires the pipeline stops after that step (groups in flight are not
    trained), acts as `--on-drift` says, and goes on from there. `noise`: the judge's noise floor, a tie there
    too (`update_settings`). Returns the newest step."""
    config, work, model = ctx.config, ctx.policy.run_dir, ctx.policy.model
    train_config = update_settings(config, work, noise)
    watch = Watch(work)
    drift: list[str] = []
    start = [StepStart.now(ctx)]

    async def rollout(_model: Any, text: str, _config: None) -> TrajectoryGroup:
        group = await TrajectoryGroup(ctx.policy.answer(prompt, text, config) for _ in range(config.group_size))
        scored = await ctx.score(group) if group.trajectories else None
        return scored or TrajectoryGroup(exceptions=group.exceptions or ["the judge could not score the group"])

    async def stop_for_drift(warning: str) -> None:
        drift.append(warning)
        trainer.request_stop()

    async def after_step(step: int, groups: list[TrajectoryGroup], metrics: dict[str, float]) -> None:
        save_trajectories(work / "trajectories" / f"{checkpoint_name(step)}.parquet", groups, step)
        said = (
            f"staleness {metrics['staleness/mean']:.2f}  dropped stale {metrics['discarded/cum/stale_groups']:.0f}, "
            f"tied {metrics['discarded/cum/zero_variance_groups']:.0f}"
        )
        began, start[0] = start[0], StepStart.now(ctx)  # the next step's cost counts from here
        await close_step(ctx, step, last, metrics, began, said, watch, stop_for_drift)

    while step < last:
        drift.clear()
        scenarios = (train_inputs[index % len(train_inputs)] for index in itertools.count())
        trainer = PipelineTrainer(
            model, ctx.policy.backend, rollout, scenarios, None,
            num_rollout_workers=2 * config.groups_per_step, min_batch_size=config.groups_per_step,
            max_steps_off_policy=config.max_steps_off_policy, max_steps=last - step, eval_every_n_steps=0,
            train_config=train_config, after_step=after_step,
        )  # fmt: skip
        await trainer.train()
        step = await model.get_step()
        if not drift:
            break
        restored = await act_on_drift(ctx, drift[0], step, train_config)
        if restored == TRAINING_ENDS:
            break
        if restored is None:
            watch.warned = True
        else:  # trained on from the restored checkpoint, under the settings the rollback set
            step = restored
            watch.restored(restored)
            train_config = update_settings(config, work, noise)
    return step


def training_inputs(ctx: RunArtifacts) -> list[str]:
    """The training inputs steps take in turn: all of them, less those the learnability check dropped
    (`RunConfig.on_tied`)."""
    train_inputs = inputs.load(ctx, "train")
    if ctx.config.preflight == "off":
        return train_inputs
    return preflight.kept_inputs(train_inputs, preflight.load(ctx).get("tied_action"))


def judge_noise(ctx: StageContext) -> tuple[float, bool]:
    """The judge's noise floor as the judge audit measured it (0 for a program judge, or when the checks were
    off), and whether a step may draw more inputs when its groups tie: where the judge is a program or the
    audit found it reliable (more draws judged by noise find only noise)."""
    program = not reads_rubric(ctx.judge)
    if ctx.config.preflight == "off":
        return 0.0, program
    audit = preflight.load(ctx)["audit"]
    return (0.0 if program else audit["rejudge_gap"]), program or audit["verdict"] == "reliable"
