"""Stage `report`: `report.md` and `reward_curve.png` for the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from autorl import activity
from autorl.redaction import redact_text
from autorl.task import RUN_SETTINGS, TaskSpec

from .. import costs, evaluation, sentinel
from ..benchmarking import gain_cost, scoreboard
from ..config import RunConfig
from ..records import evaluate, inputs, plan, preflight, sft, system_prompt, train
from ..records import evaluation as records
from ..records.pricing import added
from ..records.run import RunArtifacts
from ..sampling import step_draws
from ..stage_context import StageContext
from ..steps.validation import validation_texts

NAME = "report"
UPSTREAM = ("inputs", "system_prompt", "baseline", "preflight", "plan", "sft", "train", "evaluate")
REPORT, CURVE = "report.md", "reward_curve.png"
SHOWN = 3


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    return {"task": task.model_dump(mode="json", exclude=RUN_SETTINGS), "steps": config.steps}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    history = train.history_frame(ctx)
    frame = pd.read_parquet(ctx.artifact(evaluate.NAME) / records.SCORES_FILE)
    summary = ctx.store.summary(evaluate.NAME, ctx.keys[evaluate.NAME])
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        figure = reward_curve(history, summary["variants"], noise_floor(preflight.load(ctx)))
        figure.savefig(out / CURVE)
        plt.close(figure)
        (out / REPORT).write_text(redact_text(_markdown(ctx, history, frame, summary)))  # no URL's credentials
    return {variant: round(s["mean"], 4) for variant, s in summary["variants"].items() if "mean" in s}


NOISE_BAND = "the judge's noise floor around base"
"""The label of the band the reward curve draws around the base model's validation line."""


def noise_floor(checks: dict) -> float | None:
    """The judge audit's noise floor (its score change when asked again); None when the checks were off."""
    return None if checks.get("off") else checks["audit"]["rejudge_gap"]


def reward_curve(history: pd.DataFrame, summary: dict, floor: float | None) -> plt.Figure:
    """The training reward per step, the validation means as lines, and the judge's noise floor as a band
    around the base line (base +- floor): a trained line inside the band is a gain the report calls noise."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(history["step"], history["reward"], marker="o", label="train reward (mean of rollouts)")
    ax.fill_between(
        history["step"], history["reward"] - history["reward_std"], history["reward"] + history["reward_std"], alpha=0.2
    )
    for variant, style in (("base", ":"), ("latest", "--"), ("best", "-.")):
        if "mean" in summary.get(variant, {}):
            ax.axhline(summary[variant]["mean"], linestyle=style, color="gray", label=f"validation: {variant}")
    base = summary.get("base", {}).get("mean")
    if base is not None and floor:
        ax.axhspan(base - floor, base + floor, color="gray", alpha=0.15, label=f"{NOISE_BAND} (±{floor:.3f})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title("Reward per training step" + ("" if floor is not None else " (the judge's noise not measured)"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def validation_table(summary: dict) -> list[str]:
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


def _best_line(ctx: StageContext, summary: dict) -> str:
    """Which checkpoint is `best`, and by what (`train.best_step`)."""
    validated = train.validated_steps(ctx.policy.run_dir)
    best = summary["variants"].get("best", summary["variants"].get("latest", {})).get("step", 0)
    if validated:
        return (
            f"The best checkpoint is step {best}, by its validation reward during training (steps "
            f"{', '.join(map(str, validated))}, on the first {len(validation_texts(ctx))} validation inputs, judged "
            "beside the base answers: the table's figures include those inputs)."
        )
    return (
        f"The best checkpoint is step {best}, by the mean training reward of its step (no validation during training)."
    )


def _preflight_section(checks: dict) -> list[str]:
    """What the checks before training found: the judge audit, the learnability check, the inputs check."""
    lines = ["## Before training: the judge, the signal, the inputs", ""]
    if checks.get("off"):
        return [
            *lines,
            "The checks were off (`--preflight off`): the judge was not audited and the base model's",
            "signal not measured, so the gains below come without a noise floor.",
            "",
        ]
    audit, checked = checks["audit"], checks["inputs_check"]
    lines += [f"**{line}**" if line in checks["problems"] else line for line in checks["lines"][:1]]
    lines += [
        "",
        f"The judge (`{audit['judge']}`) was asked again about {audit['groups']} of the groups judged "
        + (
            f"(of {audit['offered']} offered; the audit stops once its verdict is settled) "
            if audit.get("offered", 0) > audit["groups"]
            else ""
        )
        + (
            f"in the {audit['reused']} (its verdict, noise, not asked again here; "
            if audit.get("reused")
            else "before training (the learnability check's, then the baseline's; "
        )
        + f"{audit['answers']} answers, {audit['attempts']} judge requests): once with each group's answers in "
        "reverse order (other positions and ids), once with its first answer shown a second time at the end.",
        "",
        "| figure | value | what it says |",
        "|---|---|---|",
        f"| score change when asked again (the noise floor) | {audit['rejudge_gap']:.3f} | mean over answers, against the rest of their group; 0 for a consistent judge |",
        f"| spread between answers | {audit['answer_spread']:.3f} | mean difference of two answers' scores in a group |",
        f"| reliability | {_number(audit['reliability'], '.2f')} | 1 - re-judging variance / score variance within a group |",
        f"| rank agreement | {_number(audit['rank_agreement'], '+.2f')} | Spearman, first judging vs reversed, per group |",
        f"| position effect | {audit['position_effect']:+.3f} | score change of an answer moved from the first slot to the last |",
        f"| two copies of one answer | {audit['duplicate_gap']:.3f} apart | mean difference of their scores |",
        "",
        *[f"**{line}**" if line in checks["problems"] else line for line in checks["lines"][1:2]],
        "",
        checks["lines"][2],
    ]
    if checked.get("off_task"):
        lines += [
            "",
            "Inputs the judge found off the task:",
            "",
            *[f"- {text}" for text in checked["off_task"][:SHOWN]],
        ]
    return [*lines, ""]


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _present(value: float | None) -> float | None:
    """A history figure, None where a step lacks it (a NaN in the frame)."""
    return None if value is None or value != value else value


def _gain_section(checks: dict, summary: dict) -> list[str]:
    """Each trained variant's gain over the base model, with the judge's verdict and noise floor and the
    sentinel's figures beside it."""
    variants = summary["variants"]
    base = variants.get("base", {}).get("mean")
    figures = sentinel.evaluation_figures(summary.get("drift", {}))
    drift = summary.get("drift", {})
    audit = None if checks.get("off") else checks["audit"]
    floor = noise_floor(checks)
    lines = [
        "| variant | gain over base | the judge's noise floor | base log-likelihood / token (vs the base's own) | KL to base / token |",
        "|---|---|---|---|---|",
        f"| base | - | - | {_number(drift.get('base', {}).get('base_logprob'), '.3f')} | {_number(drift.get('base', {}).get('kl_to_base'), '.3f')} |",
    ]
    notes = []
    for variant, s in variants.items():
        if variant == "base" or "mean" not in s:
            continue
        gain = None if base is None else s["mean"] - base
        mine = figures.get(variant, {})
        if gain is None:
            inside = "-"
        elif floor is None:
            inside = "not measured"
        else:
            inside = f"{floor:.3f}: {'inside' if abs(gain) <= floor else 'outside'}"
        logprob = drift.get(variant, {}).get("base_logprob")
        relative = mine.get("logprob_vs_base")
        lines.append(
            f"| {variant} | {_number(gain, '+.3f')} | {inside} | {_number(logprob, '.3f')} ({_number(relative, '+.3f')}) | "
            f"{_number(mine.get('kl_to_base'), '.3f')} |"
        )
        if gain is not None and floor is not None and abs(gain) <= floor:
            notes.append(
                f"**{variant}'s gain ({gain:+.3f}) is inside the judge's own noise ({floor:.3f}): it says nothing.**"
            )
        if gain is not None and (warning := sentinel.evaluation_warning(variant, gain, mine)):
            notes.append(f"**Warning:** {warning}.")
    verdict = (
        "The checks before training were off: no verdict on the judge."
        if audit is None
        else f"Judge verdict: {checks['lines'][0]}."
    )
    return [*lines, "", verdict, *[line for note in notes for line in ("", note)]]


def _system_prompt_check(check: dict | None, task: TaskSpec) -> list[str]:
    """Whether the system prompt earned its place against the task text (`system_prompt.choose`)."""
    if check is None:
        given = task.system_prompt is not None
        return ["The task gives its system prompt." if given else "The task text is the system prompt (fallback)."]
    line = system_prompt.check_line(check)
    return [f"{line[0].upper()}{line[1:]}."]


def sentinel_section(actions: list[dict], config: RunConfig) -> list[str]:
    """What the reward-hacking sentinel did during training (`--on-drift`): each action with its warning, a
    rollback's restored checkpoint, dropped steps and new settings; or that it never fired."""
    lines = ["## The reward-hacking sentinel", ""]
    if not actions:
        return [
            *lines,
            f"It never fired: the policy stayed near the base model (--on-drift {config.sentinel.on_drift}).",
        ]
    lines += ["| step | action | what it did |", "|---|---|---|"]
    for action in actions:
        did = {
            "warn": "warned; training went on",
            "stop": "stopped the run",
            "end": "ended training there (its rollbacks spent); the run evaluated what it trained",
        }.get(action["action"], "")
        if action["action"] == "rollback":
            dropped = ", ".join(str(r["step"]) for r in action["dropped"]) or "none"
            did = (
                f"restored checkpoint {action['restored']} (steps dropped and trained again: {dropped}); "
                f"kl_beta {action['kl_beta']:g}, learning rate {action['learning_rate']:g} from then on"
            )
        lines.append(f"| {action['step']} | {action['action']} | {did} |")
    return [*lines, "", *[f"- step {a['step']}: {a['warning']}" for a in actions]]


def sft_section(ctx: RunArtifacts) -> list[str]:
    """The SFT warm-up, if the run had one: what it trained on and the model steps it took (RL's come after)."""
    warm_up = sft.load(ctx)
    if not warm_up or "none" in warm_up:  # none, or none planned (the plan says why)
        return []
    steps, loss = warm_up["steps"], warm_up["final_loss"]
    if (found := warm_up.get("bootstrap")) is not None:
        source = (
            f"the policy's own best answers ({found['kept']} of {found['groups']} groups of training inputs had one "
            f"scoring at least {ctx.config.sft.min_reward:g})"
        )
        if not steps:
            why = found.get("why") or "no answer scored high enough"
            return [f"No warm-up from the policy's own answers: {why}; RL started from the base model.", ""]
    else:
        source = f"{warm_up['conversations']} conversations of `{Path(warm_up['file']).name}`"
    return [
        f"Warmed up with SFT before RL: {source}, {warm_up['epochs']} epoch(s), in {steps} model steps (1-{steps}, "
        f"final loss {_number(loss, '.4f')}); RL trained steps {steps + 1}-{train.last_step(ctx)} from its checkpoint.",
        "",
    ]


def _per_point_section(spent: dict[str, dict[str, Any]], frame: pd.DataFrame) -> list[str]:
    """What a point of validation score gained over the base cost (`gain_cost`): the training's USD (SFT
    warm-up and RL steps) and the whole run's (`spent`: the run's `costs.run_costs`), each over the trained
    LoRA's mean per-input gain."""
    training = sum(spent[stage]["usd"]["total"] for stage in (sft.NAME, train.NAME) if stage in spent)
    whole = added(list(spent.values()))["usd"]["total"]
    table = gain_cost.run_gain_costs(frame, {"training": training, "whole run": whole})
    if table.empty:
        return []
    return [
        "",
        "## Cost per point gained",
        "",
        "USD over the trained model's mean gain over the base on the validation inputs, in points (0.01 of mean",
        "reward), with the gain's 95% paired-bootstrap interval; none where the gain is not above 0.",
        "",
        scoreboard.markdown_table(table),
    ]


def _time_section(ctx: StageContext) -> list[str]:
    """Where each stage's time went when its artifact was made (`autorl.activity.breakdown`, in its summary)."""
    spent = {stage: t for stage in UPSTREAM if (t := ctx.store.summary(stage, ctx.keys[stage]).get("time"))}
    if not spent:
        return []
    kinds = [*activity.KINDS, activity.OTHER]
    return [
        "",
        "## Where the time went",
        "",
        "Seconds of each stage (when its artifact was made) during which a server was starting, the policy was",
        "answering, the judge or the generator had a request open, or a training step ran; these overlap (the",
        "judge scores a group while other rollouts go on), and other is the time when none of them ran.",
        "",
        f"| stage | {' | '.join(kinds)} |",
        f"|---|{'---|' * len(kinds)}",
        *[f"| {stage} | {' | '.join(f'{t.get(kind, 0):.1f}' for kind in kinds)} |" for stage, t in spent.items()],
    ]


def _markdown(ctx: StageContext, history: pd.DataFrame, frame: pd.DataFrame, summary: dict) -> str:
    checks, steps = preflight.load(ctx), ctx.policy.run_dir / "steps"
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
        *_system_prompt_check(system_prompt.load_check(ctx), ctx.task),
        "",
        *inputs.section(ctx),
        *_preflight_section(checks),
        *plan.section(plan.load(ctx)),
        "## Validation reward",
        "",
        "Each validation input's answers from every variant were judged together (head to head); the",
        "mean is over the inputs scored, with a 95% bootstrap confidence interval.",
        "",
        *validation_table(summary),
        "",
        _best_line(ctx, summary),
        "",
        "Beside each gain: the judge's noise floor (how much its score of one answer moves when it is asked",
        "again), and how far the variant's answers lie from the base model's (their mean log-likelihood per",
        "token under the base weights, against the base model's own answers; and the KL to the base model on",
        "them): a gain that came with answers the base model would never write may be the judge being gamed.",
        "",
        *_gain_section(checks, summary),
        "",
        "## Training",
        "",
        *sft_section(ctx),
        f"![reward curve]({CURVE})",
        "",
        "The band around the base model's validation line is the judge's noise floor: a validation line",
        "inside it is a gain the table above calls noise.",
        "",
        "Inputs drawn: a step whose groups tie gives a tied input more answers (searched, `--tie-search`), then",
        "draws more inputs (dynamic sampling, `--dynamic-sampling`); an input that tied twice in a row is set",
        "aside for a few steps, one whose answers all reached the top score is done.",
        "",
        "| step | reward | std | loss | groups trained | inputs drawn | KL to base | base log-likelihood | step time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
        *[
            f"| {int(h['step'])} | {h['reward']:.3f} | {h['reward_std']:.3f} | {h['loss']:+.4f} | "
            f"{int(h['groups_trained'])}/{int(h['groups'])} | {step_draws(steps, int(h['step']))} | "
            f"{_number(_present(h.get('kl_to_base')), '.3f')} | "
            f"{_number(_present(h.get('base_logprob')), '.3f')} | {h['step_time_s']:.1f} |"
            for h in history.to_dict("records")
        ],
    ]
    lines += ["", *sentinel_section(train.sentinel_actions(ctx.policy.run_dir), ctx.config)]
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
    spent = costs.run_costs(ctx)
    lines += costs.report_section(ctx, spent)
    lines += _time_section(ctx)
    lines += _per_point_section(spent, frame)
    return "\n".join(lines) + "\n"
