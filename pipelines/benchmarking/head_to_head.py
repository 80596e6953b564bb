"""`autorl benchmark`: every variant answers the same held-out inputs, then a judge scores them.

With RULER (a judge model) each input's answers from all variants are judged in one call, side by
side, so the scores rank the variants relative to each other; a custom judge (`module:attribute`)
scores each answer on its own. Judge results are cached in the artifact store, one artifact
`benchmark_judge/<key>/` per input, keyed by the judge, the rubric and the answers' content: a rerun
with the same variants, inputs and judge makes no model call and starts no server.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from autorl.errors import AutoRLError
from autorl.progress import gather_counted
from autorl.redaction import REDACTED, redact_text
from autorl.trajectories import TrajectoryGroup, scores_frame
from pipelines.artifacts import ArtifactStore, canonical_json, code_version, stage_key
from pipelines.records import evaluation
from ruler import DEFAULT_RUBRIC, Judge, RulerJudge, load_judge, ruler_score_group
from ruler.endpoint import EMBEDDED

from . import gain_cost, optimized_prompt, scoreboard
from .answers import Answers, Questions, answer_all
from .config import BenchmarkConfig
from .optimize import PromptOptimizer
from .optimizer_plan import OptimizerSettings
from .variants import RunView, Variant, parse_variants, read_input_texts, resolve

STAGE = "benchmark_judge"


@dataclass
class BenchmarkResult:
    results: pd.DataFrame
    """One row per variant: mean score, 95% CI, inputs scored, failed, error."""
    win_rates: pd.DataFrame
    """Row beats column: the fraction of shared inputs where the row's score is higher (ties 0.5)."""
    scores: pd.DataFrame
    """One row per judged answer: input, variant, reward, answer, explanation."""
    out: Path
    model_calls: int
    spent: dict[str, Any]
    """What this invocation spent answering and judging (`pipelines.records.pricing.priced`); 0 where all was cached."""


async def run_benchmark(config: BenchmarkConfig, console: Console | None = None) -> BenchmarkResult:
    """Answer, judge and tabulate; writes results.md/.csv, winrates.csv, scores.csv, scores.png and, with
    optimized variants, prompts.json into `out`."""
    console = console or Console(stderr=True)
    calls: Counter = Counter()
    main = RunView(config.home, config.run, calls)
    labels = parse_variants(",".join(config.variants) or f"base,{config.run}@latest")
    if config.inputs is not None:
        texts, source = read_input_texts(config.inputs), str(config.inputs)
    else:
        texts, source = main.validation_inputs(), f"the validation split of run {config.run}"
    runs = {main.name: main}
    variants = [resolve(label, main, runs) for label in labels]  # every name resolves before anything starts
    judge_spec = config.judge or main.config.judge
    if REDACTED in judge_spec:
        raise AutoRLError(f"run {config.run!r}'s judge had credentials, which run.json does not keep: pass --judge")
    judge = load_judge(judge_spec, cache_dir=config.home / "cache" / "ruler")
    rollout = main.config.unaided().rollout  # held-out answers choose their tools themselves, as evaluate's do
    if config.max_tokens is not None:
        rollout = rollout.model_copy(update={"max_tokens": config.max_tokens})
    store = ArtifactStore(config.home / "artifacts")
    task = (main.record.get("task") or {}).get("description")  # the judge is told the benchmarked run's task
    rubric = main.rubric or DEFAULT_RUBRIC
    optimizer = None
    if any(v.optimize for v in variants):  # settings and budget are checked before anything starts
        held_out = set(texts)
        train = [t for t in main.train_inputs() if t not in held_out]
        settings = OptimizerSettings.from_config(config, main.config.seed)
        identity = judge_identity(judge, judge_spec)
        optimizer = PromptOptimizer(
            settings,
            train,
            judge,
            identity,
            rubric,
            task,
            rollout,
            main.task.agent_settings(),
            store,
            console,
            main.name,
            config.price_per_hour,
        )
    console.print(
        f"benchmark of run [bold]{config.run}[/bold]: {len(variants)} variants x {len(texts)} inputs ({source})"
    )
    judge_records = getattr(judge, "calls", [])  # a RULER judge's requests; a program judge makes none
    try:
        questions = Questions(
            texts, config.samples, rollout, store, calls, main.policy, optimizer, embedded_judge=judge_spec == EMBEDDED
        )
        start = questions.meter.reading(judge_records, [])
        answers = await answer_all(variants, questions)
        for label, got in answers.items():
            if got.errors:
                what = "failed" if not got.by_input else f"lost {len(got.errors)} answers"
                console.print(f"[yellow]variant {label} {what}: {got.errors[0]}[/yellow]", highlight=False)
        groups = _groups(variants, texts, answers)
        if isinstance(judge, RulerJudge) and (single := sum(len(g) < 2 for g in groups)):
            console.print(
                f"[yellow]{single} inputs have a single answer; RULER compares answers, so they go unscored "
                "(pass --samples 2)[/yellow]"
            )
        scored = await judge_groups(groups, judge, judge_spec, rubric, store, calls, task)
    finally:
        for run in runs.values():
            await run.policy.aclose()
    spent = questions.meter.since(start, judge_records, [], config.price_per_hour)
    frame = scores_frame(scored)
    outcomes = {v.label: _outcome(answers[v.label], len(texts)) for v in variants}
    results = scoreboard.results_table(frame, outcomes, {v.label: v.cost for v in variants})
    wins = scoreboard.win_rates(scoreboard.per_input_scores(frame, labels))
    out = config.out or config.home / "runs" / config.run / "benchmark"
    about = (
        f"{len(texts)} inputs ({source}), {config.samples} answer(s) per variant and input, judge `{redact_text(judge_spec)}` "
        + (
            "(RULER: each input's answers judged together, head to head)."
            if isinstance(judge, RulerJudge)
            else "(per answer)."
        )
        + (f" {optimizer.describe()}" if optimizer is not None else "")
    )
    tuned = {v.label: (v.optimized, optimizer.paths[v.label]) for v in variants if v.optimized is not None}
    prompts = [optimized_prompt.markdown(label, result, path) for label, (result, path) in tuned.items()]
    per_point = gain_cost.gain_costs(scoreboard.per_input_scores(frame, labels), {v.label: v.cost for v in variants})
    scoreboard.write(out, f"Benchmark of run `{config.run}`", about, results, wins, frame, prompts, spent)
    gain_cost.write(out, per_point)
    if tuned:
        optimized_prompt.write_prompts(out / optimized_prompt.PROMPTS, tuned)
    return BenchmarkResult(results, wins, frame, out, sum(calls.values()), spent)


def _groups(variants: list[Variant], texts: list[str], answers: dict[str, Answers]) -> list[TrajectoryGroup]:
    """Per input, every variant's answers to it, in the order the variants were given."""
    groups = []
    for text in texts:
        trajectories = [t for v in variants for t in answers[v.label].by_input.get(text, [])]
        if trajectories:
            groups.append(TrajectoryGroup(trajectories))
    return groups


def _outcome(answers: Answers, inputs: int) -> scoreboard.Outcome:
    return scoreboard.Outcome(answered=len(answers.by_input), inputs=inputs, errors=answers.errors)


def judge_identity(judge: Judge, judge_spec: str) -> dict[str, str]:
    """The judge spec, and for a custom judge a hash of its source file: editing it invalidates its scores."""
    if isinstance(judge, RulerJudge):
        return {"judge": judge_spec}
    try:
        source = Path(inspect.getsourcefile(getattr(judge, "fn", type(judge))))
        return {"judge": judge_spec, "source": hashlib.sha256(source.read_bytes()).hexdigest()[:20]}
    except (TypeError, OSError):  # no source file (built-in, or defined interactively)
        return {"judge": judge_spec}


def judge_key(group: TrajectoryGroup, judge: dict[str, str], rubric: str, task: str | None = None) -> str:
    conversations = hashlib.sha256(canonical_json([t.messages() for t in group.trajectories]).encode()).hexdigest()
    config = {**judge, "rubric": rubric, "task": task, "conversations": conversations}
    return stage_key(STAGE, config, code_version(sys.modules[__name__]), {})


async def judge_groups(
    groups: list[TrajectoryGroup],
    judge: Judge,
    judge_spec: str,
    rubric: str,
    store: ArtifactStore,
    calls: Counter,
    task: str | None = None,
) -> list[TrajectoryGroup]:
    """Each group scored by the judge, from the cache where it was scored before; a group the judge
    cannot score is left out (the judge logs why)."""
    identity = judge_identity(judge, judge_spec)

    async def score(group: TrajectoryGroup) -> TrajectoryGroup | None:
        key = judge_key(group, identity, rubric, task)
        if store.exists(STAGE, key):
            scored = evaluation.load_groups(store.path(STAGE, key))[0]
            for cached, current in zip(scored.trajectories, group.trajectories, strict=True):
                cached.metadata = current.metadata  # same answers; the variant labels may differ
        else:
            scored = await ruler_score_group(group, judge, rubric, swallow_exceptions=True, task=task)
            if scored is not None:
                calls["judge"] += int(scored.trajectories[0].metrics.get("ruler_attempts", 0))
                with store.write(STAGE, key, {"judge": redact_text(judge_spec)}) as out:
                    evaluation.save(out, [scored])
        return scored

    results = await gather_counted((score(group) for group in groups), "judge", "input")
    return [group for group in results if group is not None]


def check_finished(result: BenchmarkResult) -> None:
    """Raise when no variant was scored (each failed, or the judge scored nothing)."""
    if result.results["n"].sum() == 0:
        failed = result.results[result.results["failed"]]
        reason = "; ".join(f"{row.variant}: {row.error}" for row in failed.itertuples()) or "the judge scored no answer"
        raise AutoRLError(f"no variant was scored ({reason}); tables in {result.out}")
