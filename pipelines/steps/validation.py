"""Validation during training, which names the best checkpoint: every `validate_every` RL steps (and at the
last), the newest checkpoint answers the first `validation_inputs` held-out inputs (`eval_samples` each), each
input's answers judged in one group beside the base model's answers to it (the baseline stage's: a model
judge's scores are relative to their group, so the same base answers are every validation's reference; a
program judge scores each alike), and the checkpoint's mean is logged as `val/reward` (`model.log`, ART's
metric): the best checkpoint is the validated one with the highest, and `keep_checkpoints`' "best" keeps it.
Only where the judge is a program or reliable, and training has more steps than `validate_every` (`due`).

The inputs it validates on are among those the evaluate stage scores, so the best checkpoint's evaluated mean
is chosen on part of its own inputs: the report says on how many.
"""

from __future__ import annotations

import statistics

from autorl.trajectories import TrajectoryGroup

from .. import evaluation
from ..config import RunConfig
from ..records import baseline, inputs
from ..records.run import RunArtifacts
from ..stage_context import StageContext

VARIANT = "step"


def due(config: RunConfig, rl_step: int, rl_steps: int, trusted: bool) -> bool:
    """Whether RL step `rl_step` of `rl_steps` is validated: where the judge can be `trusted` with it (a program,
    or a model its audit found reliable: a best chosen by noise is noise) and training is long enough to
    validate more than its last step (which alone would only name the latest)."""
    every = config.validate_every
    return trusted and 0 < every < rl_steps and (rl_step % every == 0 or rl_step == rl_steps)


def validation_texts(ctx: RunArtifacts) -> list[str]:
    """The held-out inputs a validation answers: the first `validation_inputs` of the validation split (all of
    them where it has fewer)."""
    return inputs.load(ctx, "val")[: ctx.config.validation_inputs]


async def validate(ctx: StageContext, prompt: str, step: int) -> float | None:
    """Validate checkpoint `step` (the newest, served): log its `val/reward` and return it (None when the judge
    scored none of its answers)."""
    texts = validation_texts(ctx)
    base = baseline.answers_by_input(ctx)
    name = await ctx.policy.serve_step(step)
    items = [base.get(text, []) + evaluation.answers(ctx, prompt, text, name, VARIANT) for text in texts]
    groups = await evaluation.judged_per_input(ctx, items, f"validation of step {step}")
    own = [TrajectoryGroup([t for t in g.trajectories if t.metadata.get("variant") == VARIANT]) for g in groups]
    own = [g for g in own if g.trajectories]
    if not own:
        return None
    await ctx.policy.model.log(own, split="val", step=step)
    return statistics.fmean(t.reward for g in own for t in g.trajectories)
