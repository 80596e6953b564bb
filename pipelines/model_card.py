"""The model card of an export (`autorl export`): README.md in Hugging Face's format (YAML metadata, then
markdown) with the run's evidence: the task, the base model and its license, the judge and its audit, the
training settings and curve, the held-out table with confidence intervals (`autorl benchmark`'s when it ran,
else the run's evaluation), the reward-hacking sentinel's verdict, what the run cost, where its inputs came
from, and the autorl version and commit that made it."""

from __future__ import annotations

import json
import re
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import gguf
import yaml

from autorl.backends.run_dir import read_history
from autorl.redaction import redact_text
from autorl.serving.embedded import embedded_gguf, embedded_model, resolve_base_model
from autorl.training.checkpoints import checkpoint_name

from .records import inputs, sft
from .records.train import rl_history, sentinel_actions
from .run_view import RunView
from .runs import judge_verdict
from .stages.report import sentinel_section, sft_section, validation_table

BENCHMARK_RESULTS = Path("benchmark") / "results.md"
"""Where `autorl benchmark RUN` leaves its table by default (under HOME/runs/RUN)."""
LIBRARIES = {"hf": "transformers", "peft": "peft", "gguf": "gguf"}
RELATIONS = {"hf": "finetune", "peft": "adapter", "gguf": "quantized"}
"""Hugging Face's `base_model_relation` of each format."""
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
"""A Hugging Face model id (`owner/name`): the card's `base_model` when the base is one, else left out."""


def base_identity(base_model: str) -> tuple[str, str | None]:
    """The base model's name for the card (an embedded model's Hugging Face origin, else its directory) and its
    license (the embedded GGUF's `general.license`, else a `license:` in the directory's README), None when
    unknown."""
    if (embedded := embedded_model(base_model)) is not None:
        field = gguf.GGUFReader(embedded_gguf(embedded)).fields.get(gguf.Keys.General.LICENSE)
        return embedded.origin, None if field is None else str(field.contents())
    readme = resolve_base_model(base_model) / "README.md"
    found = re.search(r"^license:\s*(\S+)", readme.read_text(encoding="utf-8"), re.M) if readme.is_file() else None
    return str(resolve_base_model(base_model)), found[1] if found else None


def autorl_version() -> str:
    """autorl's version, and the commit of the checkout it runs from where it is one."""
    try:
        number = version("autorl")
    except PackageNotFoundError:
        number = "unknown"
    source = Path(__file__).resolve().parents[1]
    try:
        top, commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines() or ("", "")
    except (OSError, subprocess.TimeoutExpired, ValueError):
        top, commit = "", ""
    ours = top and Path(top).resolve() == source  # not a repository that holds an installed copy
    return f"{number} (commit {commit})" if ours else number


def model_card(run: RunView, step: int, fmt: str, usage: list[str], identity: tuple[str, str | None]) -> str:
    """The card of checkpoint `step` of `run` exported as `fmt`; `usage`: the format's how-to-run lines;
    `identity`: the base model's name and license (`base_identity`)."""
    base, license_id = identity
    if Path(base).is_absolute():  # a local directory: its name, not where it lies on this machine
        base = Path(base).name
    record = run.record
    stages = record.get("stages", {})
    config = run.config
    metadata = {
        **({"base_model": base} if HUB_ID.fullmatch(base) else {}),
        "base_model_relation": RELATIONS[fmt],
        "license": license_id or "other",
        "library_name": LIBRARIES[fmt],
        "pipeline_tag": "text-generation",
        "tags": ["autorl", "reinforcement-learning", config.train.loss, "lora"],
    }
    lines = [
        "---",
        yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True).rstrip(),
        "---",
        "",
        f"# {run.name}@{checkpoint_name(step)}",
        "",
        f"An agent trained with reinforcement learning by autorl {autorl_version()}:",
        f"checkpoint {step} of run `{run.name}`, {config.train.loss} on a LoRA of `{base}`"
        + (
            f" (license: {license_id})."
            if license_id
            else " (license: not found; check the base model's before sharing)."
        ),
        "",
        "## Task",
        "",
        *[f"> {line}" for line in str(record["task"].get("description", "")).splitlines()],
        "",
        "## System prompt",
        "",
        "It was trained, and answers best, with this system prompt:",
        "",
        *[f"> {line}" for line in run.system_prompt().splitlines()],
        "",
        *_base_note(run.config.model, fmt),
        "## How to run it",
        "",
        *usage,
        "",
        *_training(run, step, stages),
        *_evaluation(run, step, stages),
        *sentinel_section(sentinel_actions(run.policy.run_dir), config),
        "",
        *_cost(record),
        "## Where the training inputs came from",
        "",
        _inputs_line(run),
        "",
    ]
    return redact_text("\n".join(lines))  # a card is made to be shared: no secret the run's text may hold


def _base_note(base_model: str, fmt: str) -> list[str]:
    """What an embedded base means for the weights: the LoRA was trained on the GGUF's dequantized weights."""
    if embedded_model(base_model) is None:
        return []
    note = (
        "The base weights are those of the embedded GGUF file (Q4_1, dequantized to float32), which the LoRA was "
        "trained on, not the original checkpoint's"
    )
    if fmt == "peft":
        note += ": applied to the original weights the adapter gives close answers, not the same ones"
    return [note + ".", ""]


def _training(run: RunView, step: int, stages: dict[str, Any]) -> list[str]:
    """The judge and its audit, the settings (the LoRA's as its checkpoint has them), the curve up to `step`."""
    config = run.config
    history = [h for h in rl_history(read_history(run.policy.run_dir)) if h.get("step", 0) <= step]
    rl_steps = max(0, step - sft.first_rl_step(run) + 1)
    lora = json.loads((run.checkpoint_dir(step) / "adapter_config.json").read_text())
    verdict = judge_verdict(run.record)
    audit = "not made (the checks before training did not run)" if verdict == "-" else f"**{verdict}**"
    lines = [
        "## Training",
        "",
        f"- judge: `{config.judge}`; its audit before training: {audit}"
        + _audit_line(stages.get("preflight", {}).get("summary", {})),
        f"- RL steps: {rl_steps} (of {config.steps} asked), {config.groups_per_step} groups of {config.group_size} "
        "answers each",
        f"- loss: {config.train.loss}, learning rate {config.train.learning_rate:g}, KL coefficient {config.train.kl_beta:g}",
        f"- LoRA: rank {lora['r']}, alpha {lora['lora_alpha']}, on {', '.join(sorted(lora['target_modules']))}",
        f"- seed: {config.seed}",
        "",
        *sft_section(run),
    ]
    if history:
        lines += ["| step | reward | loss |", "|---|---|---|"]
        lines += [
            f"| {h['step']} | {_figure(h.get('reward'), '.3f')} | {_figure(h.get('loss'), '+.4f')} |" for h in history
        ]
        lines.append("")
    return lines


def _figure(value: Any, spec: str) -> str:
    """A history figure, `-` where a step has none."""
    return format(value, spec) if isinstance(value, int | float) and value == value else "-"


def _audit_line(summary: dict[str, Any]) -> str:
    line = summary.get("audit", {}).get("line")
    return f" ({line})" if line else ""


def _evaluation(run: RunView, step: int, stages: dict[str, Any]) -> list[str]:
    """The held-out table: `autorl benchmark`'s when it ran (its own file), else the evaluate stage's."""
    benchmark = run.home / "runs" / run.name / BENCHMARK_RESULTS
    lines = ["## Held-out evaluation", ""]
    if benchmark.is_file():
        return [
            *lines,
            f"From `autorl benchmark {run.name}` (`{BENCHMARK_RESULTS}`); this export is `{run.name}@{step}`:",
            "",
            benchmark.read_text(),
            "",
        ]
    summary = stages.get("evaluate", {}).get("summary")
    if not summary or "variants" not in summary:
        return [*lines, "The run was not evaluated (its evaluate stage did not run).", ""]
    steps = {s.get("step") for s in summary["variants"].values()}
    caveat = "" if step in steps else f" This export is step {step}, which the evaluation did not include."
    return [
        *lines,
        "The run's evaluation on its validation inputs: every variant's answers to an input judged together, the "
        f"mean over the inputs with a 95% bootstrap confidence interval.{caveat}",
        "",
        *validation_table(summary),
        "",
    ]


def _cost(record: dict[str, Any]) -> list[str]:
    cost = record.get("cost")
    if not cost:
        return []
    return [
        "## What the run cost",
        "",
        f"{cost['seconds']:.0f} s, {cost.get('tokens_total', 0)} tokens, ${cost['usd']['total']:.4f} "
        f"(compute ${cost['usd']['compute']:.4f}, API ${cost['usd']['api']:.4f}).",
        "",
    ]


def _inputs_line(run: RunView) -> str:
    counts = f"{len(run.train_inputs())} train and {len(inputs.load(run, 'val'))} validation inputs"
    if run.config.inputs_file is not None:
        return f"{counts}, from the file `{run.config.inputs_file.name}`."
    return f"{counts}, generated from the task by `{run.config.generator}` (seed {run.config.seed}), deduplicated."
