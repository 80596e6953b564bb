"""Re-measure every result the docs draw on: one part per result file, each the command that wrote it.

    python benchmarks/perf/remeasure.py --list                 # the parts, their commands, a time estimate
    python benchmarks/perf/remeasure.py --only 'learning_text_capitals_s*,grpo_step'
    python benchmarks/perf/remeasure.py --stale                # only the parts whose result is stale

The results the docs draw on are those the pages' macros name (docs/*.md, `docs/hooks.py`: a name, or a
family as a shell pattern; the performance table is every result with `ratios`) and those README.md and
examples/README.md draw their figures from. A part runs the command its result file recorded (`command`;
`_common.write_result` records it), or the one `COMMANDS` gives where an older file recorded none, with any
`--home` moved to a fresh directory of its own under `--work` (a recorded home would hand back the runs it
kept, not measure them). Each part writes its own result file as it ends, so a part killed midway costs only
that part. The estimate is each result's recorded `wall_time_s` (the time it took when measured; a part
without one is "unknown").

Measure on a quiet machine from a clean checkout of the commit to measure (a `git worktree` of it): a result
written beside uncommitted changes is recorded as measured on them (CONTRIBUTING.md, "Tests and benchmarks").
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PERF = Path(__file__).resolve().parent
ROOT = PERF.parents[1]
RESULTS = PERF / "results"

COMMANDS: dict[str, list[str]] = {
    "grpo_step": ["python", "benchmarks/perf/perf_grpo_step.py", "--steps", "5", "--rounds", "2", "--no-adapter"],
    "rollout": ["python", "benchmarks/perf/perf_rollout.py"],
    "merged_reload": ["python", "benchmarks/perf/perf_merged_reload.py"],
    "judge_tokens": ["python", "benchmarks/perf/perf_judge_tokens.py"],
    "replica_simulation": ["python", "benchmarks/perf/replica_simulation.py"],
    "trainer_attention": ["python", "benchmarks/perf/perf_trainer_attention.py"],
    "merge_thread": ["python", "benchmarks/perf/perf_merge_thread.py"],
    "convert": ["python", "benchmarks/perf/perf_convert.py"],
    "remote": ["python", "benchmarks/perf/perf_remote.py"],
    "server_dtype": ["python", "benchmarks/perf/perf_server_dtype.py"],
    "shared_cores": ["python", "benchmarks/perf/perf_shared_cores.py"],
    "scaling": ["python", "benchmarks/perf/scaling.py"],
    "generator": ["python", "benchmarks/perf/perf_generator.py"],
    "structured_output": ["python", "benchmarks/perf/perf_structured_output.py"],
    "replicas": ["python", "benchmarks/perf/perf_replicas.py"],
    "judge_replicas": ["python", "benchmarks/perf/perf_judge_replicas.py"],
    "server_start": ["python", "benchmarks/perf/perf_server_start.py"],
    "async_throughput": ["python", "benchmarks/perf/perf_async.py"],
}
"""The command of a result whose file recorded none (written before `write_result` kept it): the script and the
flags the docs give for it; the script's default result name is the result's."""

MACRO = re.compile(r"\{\{\s*(\w+)\((.*?)\)\s*\}\}", re.DOTALL)
FIRST_NAME = re.compile(r"^\s*\"([A-Za-z0-9_*?\[\]]+)\"")


@dataclass(frozen=True)
class Part:
    """One result to measure again: its name, the command that writes it, and how long that took last time."""

    name: str
    command: tuple[str, ...] | None
    estimate_s: float | None

    def argv(self, work: Path) -> list[str]:
        """The command as run: this Python, and a `--home` of its own under `work`."""
        assert self.command is not None
        argv = [sys.executable if self.command[0] == "python" else self.command[0], *self.command[1:]]
        if "--home" in argv:
            argv[argv.index("--home") + 1] = str(work / self.name)
        elif argv[1:2] == ["benchmarks/perf/learning.py"]:  # its default home keeps the runs it made before
            at = argv.index("--") if "--" in argv else len(argv)
            argv[at:at] = ["--home", str(work / self.name)]
        return argv


def result_names() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("*.json"))


def drawn_on(root: Path = ROOT) -> list[str]:
    """The results the docs draw on: named by a macro of a page of docs/ or a figure of a README."""
    names = result_names()
    pages = [*sorted((root / "docs").glob("*.md")), root / "README.md", root / "examples" / "README.md"]
    found: set[str] = set()
    for page in pages:
        for macro, args in MACRO.findall(page.read_text()):
            if macro == "performance_table" and not args.strip():
                found |= {n for n in names if json.loads((RESULTS / f"{n}.json").read_text()).get("ratios")}
            elif macro == "faults_table" and not args.strip():
                found.add("faults")
            elif match := FIRST_NAME.match(args):
                found |= set(fnmatch.filter(names, match.group(1)))
    return sorted(found)


def part(name: str) -> Part:
    record = json.loads((RESULTS / f"{name}.json").read_text())
    command = record.get("command") if isinstance(record.get("command"), list) else COMMANDS.get(name)
    return Part(name, tuple(command) if command else None, record.get("wall_time_s"))


def selected(only: str | None, stale_only: bool) -> list[Part]:
    names = drawn_on()
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
        unknown = [p for p in patterns if not fnmatch.filter(result_names(), p)]
        if unknown:
            raise SystemExit(f"no result matches {', '.join(unknown)} (python benchmarks/perf/remeasure.py --list)")
        names = sorted({n for p in patterns for n in fnmatch.filter(result_names(), p)})
    if stale_only:
        from benchmarks.perf import stale

        names = [n for n in names if stale.status(ROOT, n, stale.MEASURES[n], RESULTS).stale]
    return [part(name) for name in names]


def duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def print_plan(parts: list[Part]) -> None:
    known = [p.estimate_s for p in parts if p.estimate_s is not None]
    for p in parts:
        estimate = "unknown" if p.estimate_s is None else duration(p.estimate_s)
        command = " ".join(p.command) if p.command else "no command recorded (add one to remeasure.COMMANDS)"
        print(f"{p.name:48} {estimate:>8}  {command}")
    unknown = len(parts) - len(known)
    print(f"\n{len(parts)} parts, about {duration(sum(known))} by their recorded times"
          + (f", {unknown} of unknown time" if unknown else ""))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="Comma-separated result names or shell patterns (learning_text_capitals_s*).")
    parser.add_argument("--stale", action="store_true", help="Only the results stale.py finds stale.")
    parser.add_argument("--list", action="store_true", help="Print the parts and the estimate; run nothing.")
    parser.add_argument("--work", type=Path, default=ROOT / ".autorl-remeasure", help="Where the parts' runs live.")
    args = parser.parse_args(argv)
    parts = selected(args.only, args.stale)
    print_plan(parts)
    if args.list:
        return 0
    if missing := [p.name for p in parts if p.command is None]:
        raise SystemExit(f"no command recorded for {', '.join(missing)}: add them to COMMANDS, or leave them out")
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout  # fmt: skip
    if any(not line[3:].startswith("benchmarks/perf/results/") for line in dirty.splitlines()):
        print("warning: uncommitted changes: the results will say they measured them (dirty)", file=sys.stderr)
    failed = []
    for i, p in enumerate(parts, 1):
        print(f"\n[{i}/{len(parts)}] {p.name}: {' '.join(p.argv(args.work))}", flush=True)
        started = time.monotonic()
        if subprocess.run(p.argv(args.work), cwd=ROOT).returncode != 0:
            failed.append(p.name)
        print(f"[{i}/{len(parts)}] {p.name}: {duration(time.monotonic() - started)}", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
