"""Run the stages in order, reusing every cached artifact; record the run in `<home>/runs/<name>/`.

The run directory holds `run.json` (task, config, stage keys, status, figures per stage, among them where a
stage's time went, and the invocation's as `time`: `autorl.activity.breakdown`; secrets redacted,
the task file's path kept), links to the training directory's `checkpoints/`, `history.jsonl` and
`trajectories/`, the report (`report.md`, `reward_curve.png`) and the trackers' files (`wandb/`, `mlruns/`, `tensorboard/`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console

from autorl import activity, tracing
from autorl.backends.run_dir import ensure_writable
from autorl.errors import AutoRLError
from autorl.redaction import redact_text, redacted
from autorl.serving.vllm_server import VLLMServer
from autorl.task import RUN_SETTINGS, TaskSpec
from autorl.tracking import Tracker, tracker_names
from autorl.training.engines import prepare_engine
from ruler import Judge
from ruler.calls import CallRecord, summarize
from ruler.endpoint import EMBEDDED
from ruler.loading import load_judge
from ruler.ruler_judge import RulerJudge

from . import costs
from .artifacts import ArtifactStore, code_version, stage_key, write_json
from .config import STAGES, RunConfig
from .policy import Policy
from .records import step_costs
from .records.pricing import added
from .records.run import RUN_FILE, read_record
from .run_lock import run_locks
from .stage_context import StageContext
from .stages import STAGE_MODULES, sft
from .stages.report import CURVE, REPORT

EXPLAINED_STAGES = ("evaluate",)
"""The stages whose judge explanations the report shows (`RunConfig.judge_explanations` "report": only these)."""
LINKS = ("checkpoints", "history.jsonl", "trajectories")


def default_run_name(task: TaskSpec, model: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", task.description.lower()).strip("-")[:40].rstrip("-")
    digest = hashlib.sha256(f"{task.description}\n{model}".encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def skipped_because(stage: str, config: RunConfig) -> str | None:
    """Why `stage` has nothing to do under `config` (its module's optional `skipped`), or None."""
    skipped = getattr(STAGE_MODULES[stage], "skipped", None)
    return skipped(config) if skipped is not None else None


def stage_keys(task: TaskSpec, config: RunConfig) -> dict[str, str]:
    """Every stage's key, from settings and upstream keys alone: computable before anything runs. A stage
    skipped under `config` reads nothing upstream."""
    keys: dict[str, str] = {}
    for name in STAGES:
        module = STAGE_MODULES[name]
        upstream = {} if skipped_because(name, config) else {u: keys[u] for u in module.UPSTREAM}
        keys[name] = stage_key(name, module.settings(task, config), code_version(module), upstream)
    return keys


def forced_stages(force: list[str]) -> set[str]:
    """The stages `--force` recomputes: each named stage and every stage after it."""
    unknown = [f for f in force if f not in (*STAGES, "all")]
    if unknown:
        raise AutoRLError(f"--force {unknown[0]}: no such stage; stages are {', '.join(STAGES)} (or all)")
    if "all" in force:
        return set(STAGES)
    first = min((STAGES.index(f) for f in force), default=len(STAGES))
    return set(STAGES[first:])


async def run_stages(task: TaskSpec, config: RunConfig, console: Console | None = None) -> dict[str, Any]:
    """Run (or reuse) every stage for `task`; returns the run record (also in run.json).

    The run's settings are `config`'s: build it with `RunConfig.for_task(task, ...)` to take the task
    file's `[train]` / `[trainer]` tables and `inputs_file` into it.
    """
    # Unsloth where it trains, before anything imports transformers or peft; unsloth where it cannot run fails here
    engine = prepare_engine(config.trainer.engine)
    console = console or Console(stderr=True)
    name = config.name or default_run_name(task, config.model)
    run_dir = config.home / "runs" / name
    keys = stage_keys(task, config)
    store = ArtifactStore(config.home / "artifacts")
    # a user's mistake fails here, before a run directory, a lock or a server exists
    forced = forced_stages(config.force)
    tracker_names(config.trackers())  # a tracker's missing package
    judge = load_judge(config.judge, cache_dir=config.home / "cache" / "ruler")
    sft.check_file(config)  # a missing or malformed SFT file
    with run_locks(config.home, name, keys["train"]):  # one process per run name and per training
        traced = tracing.configure(config.otlp_endpoint)  # off unless asked for: then every span below
        try:
            attributes = {
                "autorl.run": name,
                "gen_ai.request.model": config.model,
                **tracing.io(input=task.description),
            }
            with tracing.span("autorl.run", attributes) as span:
                record = await _run_locked(task, config, console, name, run_dir, keys, store, forced, judge, engine)
                tracing.set_attributes(span, run_totals(record))
                return record
        finally:
            if traced:
                tracing.shutdown()  # what is buffered is sent


async def _run_locked(
    task: TaskSpec,
    config: RunConfig,
    console: Console,
    name: str,
    run_dir: Path,
    keys: dict[str, str],
    store: ArtifactStore,
    forced: set[str],
    judge: Judge,
    engine: str,
) -> dict[str, Any]:
    record = _open_record(run_dir, name, task, config)
    calls: Counter = Counter()
    policy = Policy(config, store.root, keys["train"], calls, task, run_dir / "logs")
    tracker = Tracker(config.trackers(), run_dir, name, record["wandb_id"], config.model_dump(mode="json"))
    ctx = StageContext(task, config, store, keys, policy, judge, tracker, run_dir, console, calls)
    record.update(keys=keys, status="running", stages={}, trainer_engine=engine)
    record.pop("stopped", None)  # an earlier invocation's budget stop
    _link_training(run_dir, policy.run_dir)
    write_json(run_dir / RUN_FILE, record)
    console.print(f"run [bold]{name}[/bold] in {run_dir}")
    servers_before, began = VLLMServer.starts, time.monotonic()
    try:
        for stage in forced:  # all at once: a stage may write into a later one's artifact (preflight into train's)
            store.remove(stage, keys[stage])
        needed = servers_needed(task, config, forced, ctx)
        if needed == {"policy", "embedded"}:
            await policy.start(with_embedded=True)  # both starts at once, before the first stage needs one
        elif "policy" in needed:
            policy.check_can_start()  # what would fail its start fails before the first stage
        for stage in STAGES:
            started, before = time.monotonic(), sum(calls.values())
            marks = len(ctx.judge_calls()), len(ctx.generator_calls)
            reading = policy.meter.reading(ctx.judge_calls(), ctx.generator_calls)
            if why := skipped_because(stage, config):
                entry = {"cached": True, "summary": {"skipped": why}}  # nothing computed; `autorl show` says why
                console.print(f"[dim]{stage}: skipped ({why})[/dim]")
            elif STAGE_MODULES[stage].is_done(ctx):
                entry = {"cached": True, "summary": store.summary(stage, keys[stage])}
                console.print(f"[dim]{stage}: cached ({keys[stage]})[/dim]")
            else:
                console.print(f"[bold]{stage}[/bold] ({keys[stage]})")
                if isinstance(judge, RulerJudge):  # explanations where the report shows them (judge_explanations)
                    judge.explain = config.judge_explanations == "always" or stage in EXPLAINED_STAGES
                judged = Counter(ctx.judging)
                with tracing.span(f"autorl.stage {stage}", {"autorl.stage": stage, "autorl.key": keys[stage]}) as span:
                    summary = await STAGE_MODULES[stage].run(ctx)
                    tracing.set_attributes(span, {"autorl.model_calls": sum(calls.values()) - before})
                if ctx.judging != judged:  # what the judge did in this stage
                    summary["judging"] = {kind: ctx.judging[kind] - judged[kind] for kind in ctx.judging}
                if stage != "train":  # training's cost is its steps' (`pipelines.costs`)
                    summary["cost"] = policy.meter.since(
                        reading, ctx.judge_calls(), ctx.generator_calls, config.price_per_hour
                    )
                summary["time"] = activity.breakdown(started, more=call_intervals(ctx, marks))  # where it went
                store.write_summary(stage, keys[stage], summary)
                entry = {"cached": False, "summary": summary}
            entry.update(seconds=round(time.monotonic() - started, 2), model_calls=sum(calls.values()) - before)
            if logged := call_log(ctx.judge_calls()[marks[0] :], ctx.generator_calls[marks[1] :]):
                entry["calls"] = logged
            record["stages"][stage] = entry
            _record_cost(record, ctx)
            write_json(run_dir / RUN_FILE, record)
            if gate := getattr(STAGE_MODULES[stage], "gate", None):  # cached or not: may stop the run here
                gate(ctx, entry["summary"])
            costs.check_run_budget(ctx, f"stage {stage}")
        _copy_report(store.path("report", keys["report"]), run_dir)
        record.update(status="done")
    except costs.BudgetReached as exc:  # a clean stop: the run resumes with a higher budget
        if stage not in record["stages"]:  # stopped inside the stage (train, after a step)
            record["stages"][stage] = {
                "cached": False,
                "summary": {"stopped": "budget"},
                "seconds": round(time.monotonic() - started, 2),
                "model_calls": sum(calls.values()) - before,
            }
        _record_cost(record, ctx)
        record.update(status="budget", stopped=str(exc))
        (run_dir / "report.md").write_text(costs.budget_report(name, str(exc), ctx), encoding="utf-8")
        console.print(f"[yellow]{exc}[/yellow]", highlight=False)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt | SystemExit | asyncio.CancelledError)  # Ctrl-C cancels
        record.update(status="interrupted" if interrupted else "failed")
        record["error"] = redact_text(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        raise
    finally:
        record.update(
            updated=time.time(),
            time=activity.breakdown(began, more=call_intervals(ctx, (0, 0))),
            model_calls=dict(calls),
            server_starts=VLLMServer.starts - servers_before + policy.backend.remote_server_starts,
        )
        write_json(run_dir / RUN_FILE, record)
        tracker.finish()
        await policy.aclose()
    console.print(f"done: report in {run_dir / 'report.md'}; model calls this run: {sum(calls.values())}")
    return record


def run_totals(record: dict[str, Any]) -> dict[str, Any]:
    """The run span's totals, what its trace's root says unopened: the tokens and USD of the run's artifacts, each
    evaluated variant's held-out reward, the status, and one line of them as its output. (Tokens are autorl's
    attributes, not OpenInference's `llm.token_count.*`, which trace views add up over the spans below.)"""
    cost = record.get("cost") or {}
    sides = {side: sum(t.get(side, 0) for t in cost.get("tokens", {}).values()) for side in ("prompt", "completion")}
    variants = record.get("stages", {}).get("evaluate", {}).get("summary", {}).get("variants", {})
    rewards = {variant: figures["mean"] for variant, figures in variants.items() if "mean" in figures}
    usd = cost.get("usd", {}).get("total", 0.0)
    said = [f"held-out reward: {', '.join(f'{v} {r:.3f}' for v, r in rewards.items())}"] if rewards else []
    said.append(f"{cost.get('tokens_total', 0)} tokens, ${usd:.4f}, {record.get('status')}")
    return {
        **{f"autorl.tokens.{side}": count for side, count in sides.items()},
        "autorl.tokens.total": cost.get("tokens_total", 0),
        "autorl.usd": usd,
        **{f"autorl.reward.{variant}": reward for variant, reward in rewards.items()},
        "autorl.status": record.get("status"),
        **tracing.io(output="; ".join(said)),
    }


POLICY_STAGES = ("baseline", "train", "evaluate")
"""The stages that ask the policy's server (the others ask none, or only the generator)."""


def servers_needed(task: TaskSpec, config: RunConfig, forced: set[str], ctx: StageContext) -> set[str]:
    """The servers the stages still to run will ask for: "policy" (its vLLM server) and "embedded" (the embedded
    judge's or generator's model); a cached stage asks none."""
    pending = {stage for stage in STAGES if stage in forced or not STAGE_MODULES[stage].is_done(ctx)}
    # a prompt is written and checked (the policy answers under each candidate) unless given or the check is off
    writes_prompt = "system_prompt" in pending and task.system_prompt is None and config.system_prompt_check > 0
    needed = {"policy"} if pending & set(POLICY_STAGES) or writes_prompt else set()
    generates = ("inputs" in pending and config.inputs_file is None) or writes_prompt
    if (config.judge == EMBEDDED and "policy" in needed) or (config.generator == EMBEDDED and generates):
        needed.add("embedded")
    return needed


def _record_cost(record: dict[str, Any], ctx: StageContext) -> None:
    """Each stage's cost (`pipelines.costs.run_costs`) into its entry, and their sum as the run's; the train
    entry also gets each step's (`records.step_costs.step_costs`: they add up to its cost)."""
    per_stage = costs.run_costs(ctx)
    for stage, entry in record["stages"].items():
        if stage in per_stage:
            entry["cost"] = per_stage[stage]
    if "train" in per_stage and "train" in record["stages"]:
        record["stages"]["train"]["step_costs"] = step_costs.step_costs(ctx)
    record["cost"] = added(list(per_stage.values()))


def call_intervals(ctx: StageContext, marks: tuple[int, int]) -> list[tuple[activity.Kind, float, float]]:
    """The judge's and the generator's requests since `marks` (counts of their records), as time intervals."""
    judge, generator = ctx.judge_calls()[marks[0] :], ctx.generator_calls[marks[1] :]
    return [
        (kind, record.started, record.started + record.seconds)
        for kind, records in (("judge", judge), ("generator", generator))
        for record in records
        if record.started is not None
    ]


def call_log(judge: list[CallRecord], generator: list[CallRecord]) -> dict[str, Any]:
    """A stage's model requests for run.json: per kind (judge, generator) a summary per model
    (`ruler.calls.summarize`: calls, failures by cause, seconds, tokens) and every request's record."""
    return {
        kind: {"summary": summarize(records), "log": [r.as_json() for r in records]}
        for kind, records in (("judge", judge), ("generator", generator))
        if records
    }


def _open_record(run_dir: Path, name: str, task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    """The run's record, its secrets redacted (`autorl.redaction`: MCP servers' `env` values, URL credentials,
    values named like keys); refuses a run name that exists with a different task unless resuming or forcing."""
    ensure_writable(run_dir)
    path = run_dir / RUN_FILE
    task_json = redacted(task.model_dump(mode="json", exclude=RUN_SETTINGS))  # those are in the config
    written = {"task": task_json, "task_file": task.source_file and str(task.source_file)}
    written["config"] = redacted(config.model_dump(mode="json"))
    if path.exists():
        old = read_record(path)
        if old.get("task") != task_json and not (config.resume or config.force):
            raise AutoRLError(
                f"run {name!r} exists with a different task; choose another --name, or pass --resume to replace its task"
            )
        return {**old, **written}
    wandb_id = hashlib.sha256(f"{name}{time.time()}".encode()).hexdigest()[:12]
    return {"name": name, **written, "wandb_id": wandb_id}


def _link_training(run_dir: Path, train_dir: Path) -> None:
    """Point the run directory's checkpoints/history/trajectories at the current training directory."""
    for name in LINKS:
        link = run_dir / name
        target = Path(os.path.relpath(train_dir / name, run_dir))
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            link.unlink() if link.is_symlink() or link.is_file() else shutil.rmtree(link)
        link.symlink_to(target)


def _copy_report(report_dir: Path, run_dir: Path) -> None:
    for name in (REPORT, CURVE):
        shutil.copyfile(report_dir / name, run_dir / name)
