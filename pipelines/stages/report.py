"""Stage `report`: `report.md` and `reward_curve.png` for the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from autorl.redaction import redact_text
from autorl.task import RUN_SETTINGS, TaskSpec

from .. import evaluation
from ..config import RunConfig
from ..context import StageContext
from . import evaluate, inputs, system_prompt, train

NAME = "report"
UPSTREAM = ("inputs", "system_prompt", "baseline", "train", "evaluate")
REPORT, CURVE = "report.md", "reward_curve.png"
SHOWN = 3


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    return {"task": task.model_dump(mode="json", exclude=RUN_SETTINGS), "steps": config.steps}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    history = train.history_frame(ctx)
    frame = pd.read_parquet(ctx.artifact(evaluate.NAME) / evaluation.SCORES_FILE)
    summary = ctx.store.summary(evaluate.NAME, ctx.keys[evaluate.NAME])
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        _plot(history, summary["variants"], out / CURVE)
        (out / REPORT).write_text(redact_text(_markdown(ctx, history, frame, summary)))  # no URL's credentials
    return {variant: round(s["mean"], 4) for variant, s in summary["variants"].items() if "mean" in s}


def _plot(history: pd.DataFrame, summary: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(history["step"], history["reward"], marker="o", label="train reward (mean of rollouts)")
    ax.fill_between(
        history["step"], history["reward"] - history["reward_std"], history["reward"] + history["reward_std"], alpha=0.2
    )
    for variant, style in (("base", ":"), ("latest", "--"), ("best", "-.")):
        if "mean" in summary.get(variant, {}):
            ax.axhline(summary[variant]["mean"], linestyle=style, color="gray", label=f"validation: {variant}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title("Reward per training step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _validation_table(summary: dict) -> list[str]:
    """The variants' figures with the inputs each rests on, a coverage warning, and what the judge had to do."""
    total = summary["val_inputs"]
    lines = ["| variant | step | mean reward | 95% CI | inputs scored |", "|---|---|---|---|---|"]
    for variant, s in summary["variants"].items():
        figures = f"{s['mean']:.3f} | [{s['ci_low']:.3f}, {s['ci_high']:.3f}]" if "mean" in s else "- | -"
        lines.append(f"| {variant} | {s.get('step', 0)} | {figures} | {s['inputs']}/{total} |")
    if warning := evaluation.coverage_warning(summary):
        lines += ["", f"**Warning:** {warning}."]
    judging = summary.get("judging")
    if judging:
        lines += [
            "",
            f"The judge was given {judging.get('groups', 0)} groups: {judging.get('failed', 0)} could not be scored, "
            f"{judging.get('retries', 0)} requests were retried, and {judging.get('shortened', 0)} answers were "
            "shortened to fit its context.",
        ]
    return lines


def _markdown(ctx: StageContext, history: pd.DataFrame, frame: pd.DataFrame, summary: dict) -> str:
    train_inputs, val_inputs = inputs.load(ctx, "train"), inputs.load(ctx, "val")
    lines = [
        f"# autorl run `{ctx.run_dir.name}`",
        "",
        "## Task",
        "",
        ctx.task.description,
        "",
        "## System prompt",
        "",
        *[f"> {line}" for line in system_prompt.load(ctx).splitlines()],
        "",
        f"## Inputs ({len(train_inputs)} train, {len(val_inputs)} validation; a sample)",
        "",
        *[f"- {text}" for text in train_inputs[:5]],
        "",
        "## Validation reward",
        "",
        "Each validation input's answers from every variant were judged together (head to head); the",
        "mean is over the inputs scored, with a 95% bootstrap confidence interval.",
        "",
        *_validation_table(summary),
        "",
        "## Training",
        "",
        f"![reward curve]({CURVE})",
        "",
        "| step | reward | std | loss | groups trained | step time (s) |",
        "|---|---|---|---|---|---|",
        *[
            f"| {int(h.step)} | {h.reward:.3f} | {h.reward_std:.3f} | {h.loss:+.4f} | "
            f"{int(h.groups_trained)}/{int(h.groups)} | {h.step_time_s:.1f} |"
            for h in history.itertuples()
        ],
    ]
    trained = frame[frame["variant"] != "base"].sort_values("reward", ascending=False)
    for title, rows in (("Best", trained.head(SHOWN)), ("Worst", trained.tail(SHOWN).iloc[::-1])):
        lines += ["", f"## {title} validation answers of the trained model", ""]
        for row in rows.itertuples():
            lines += [
                f"**Input:** {row.input}",
                "",
                f"**Answer ({row.variant}, reward {row.reward:.2f}):** {row.answer}",
                "",
                f"**Judge:** {row.explanation}",
                "",
            ]
    return "\n".join(lines) + "\n"
