"""What the embedded input generator writes, on an older commit and on this checkout, for several tasks.

    python benchmarks/perf/perf_generator.py --baseline REV [--inputs 40] [--tasks all]

For each task (`TASKS`: plain-text tasks with no examples, as a first run meets them) and each checkout (the
commit `--baseline`, checked out in a temporary git worktree, and this one), generates `--inputs` inputs
with the embedded generator (`generate_inputs(..., write_system_prompt=False)`, seed 0, each checkout's
default settings) in a subprocess run from that checkout, and counts: whether the N inputs were reached
within the call cap, the generator calls, what was dropped (cut off or too short, junk, duplicates), and in
the kept inputs the **instruction echoes**: inputs that repeat the generator's request instead of being a
user's message (`echo_reason`: a field label of either generator's request followed by a colon, such as
"length: short" or "guidance: Rewrite ...", or four consecutive words of either request's instructions,
the task description excepted). Echoes are counted by the same rule for both commits, whatever each
commit's own filter drops. Prints a table and every kept input; writes
`benchmarks/perf/results/generator.json`. Timings are not the point (perf_first_run.py measures them).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from _common import baseline_checkout, commit, write_result

TASKS = (
    "Reply to a customer asking for a refund, politely, in two sentences",
    "Write a one-line git commit message for the described code change",
    "Answer a trivia question in one short sentence",
    "Turn a casual sentence into formal business English",
)
"""The README's task, and the three plain-text tasks issue 25 found the old generator failing or echoing on."""

FIELD_LABELS = (
    "task", "guidance", "examples", "example", "difficulty", "length", "avoid", "count", "new_inputs",
    "easy", "medium", "hard", "short", "long", "common", "average length",
)  # fmt: skip
"""Field names and values of the old generator's request (DSPy's WriteInputs) that its inputs echoed."""

INSTRUCTIONS = (
    # the old generator's request (DSPy's WriteInputs signature and field descriptions)
    "Write new inputs that real users would send to an AI agent doing the task. Each input is one complete "
    "user message. Follow the guidance; match the style of the examples without copying them; do not repeat "
    "any input listed in avoid. what the agent does extra instructions for the inputs may be empty example "
    "inputs showing the style inputs already written write different ones how many inputs to write the new "
    "inputs one complete user message each how hard the inputs should be how long each input should be "
    "easy common typical requests short one sentence",
    # this checkout's request (autorl.inputs.generation.input_request)
    "An AI assistant has this job. Write a message that a user sends to this assistant. The user writes",
)

GENERATE = """
import json, sys
from autorl.task import TaskSpec
try:
    from autorl.inputs.generation import generate_inputs
except ImportError:  # before issue 23's layout
    from autorl.inputs import generate_inputs
task, n = sys.argv[1], int(sys.argv[2])
try:
    result = generate_inputs(TaskSpec(description=task), n, "embedded", 0, write_system_prompt=False)
    out = {"ok": True, "inputs": [row.input for row in result.inputs], "stats": result.stats.model_dump()}
except Exception as exc:  # the cap reached: the error line says what was dropped
    out = {"ok": False, "error": str(exc).splitlines()[0][:400], "inputs": [], "stats": None}
print("RESULT " + json.dumps(out))
"""


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def echo_reason(text: str, task: str) -> str | None:
    """Why a kept input is an echo of the generator's request (None: it is not)."""
    lowered = text.lower()
    for label in FIELD_LABELS:
        if re.search(rf"(^|\W){re.escape(label)}\s*:", lowered):
            return f"field label '{label}:'"
    task_grams = _grams(words(task))
    said = _grams(words(text)) - task_grams
    for instructions in INSTRUCTIONS:
        if shared := said & _grams(words(instructions)):
            return f"instructions '{' '.join(sorted(shared)[0])}'"
    return None


def _grams(tokens: list[str], size: int = 4) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)}


def generate(checkout: Path, task: str, n: int) -> dict:
    """`n` inputs for `task` by the checkout's embedded generator, with its stats and the echoes among them."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", GENERATE, task, str(n)], cwd=checkout, capture_output=True, text=True, check=False
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the generator of {checkout} crashed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(line.removeprefix("RESULT "))
    echoes = {text: reason for text in out["inputs"] if (reason := echo_reason(text, task))}
    kept = len(out["inputs"])
    return {
        **out,
        "seconds": round(time.monotonic() - started, 1),
        "echoes": echoes,
        "echo_share": round(len(echoes) / kept, 3) if kept else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="The commit to compare with (e.g. the one before a change).")
    parser.add_argument("--inputs", type=int, default=40, help="Inputs asked for per task.")
    parser.add_argument("--tasks", default="all", help="Comma-separated task numbers (1-based) or 'all'.")
    args = parser.parse_args()
    tasks = TASKS if args.tasks == "all" else [TASKS[int(i) - 1] for i in args.tasks.split(",")]
    started = time.monotonic()
    results: dict[str, dict[str, dict]] = {}
    with baseline_checkout(args.baseline) as checkouts:
        for task in tasks:
            results[task] = {}
            for label, checkout in checkouts.items():
                results[task][label] = run = generate(checkout, task, args.inputs)
                stats = run["stats"] or {}
                print(
                    f"\n{label} | {task}\n  reached {args.inputs}: {run['ok']}  calls {stats.get('calls', '-')}  "
                    f"dropped: cut/short {stats.get('rejected', '-')}, junk {stats.get('rejected_junk', '-')}, "
                    f"duplicates {stats.get('duplicates', '-')}  echoes kept {len(run['echoes'])}/{len(run['inputs'])}"
                    + ("" if run["ok"] else f"\n  error: {run['error']}")
                )
                for text in run["inputs"]:
                    print(f"    {'ECHO ' if text in run['echoes'] else ''}{text[:150]!r}")
    print("\ntask | checkout | reached | calls | junk | duplicates | echo share of kept")
    for task, by in results.items():
        for label, run in by.items():
            stats = run["stats"] or {}
            print(
                f"{task[:40]} | {label} | {run['ok']} | {stats.get('calls', '-')} | {stats.get('rejected_junk', '-')} "
                f"| {stats.get('duplicates', '-')} | {run['echo_share']}"
            )
    result = {"baseline": args.baseline, "this_checkout": commit(), "inputs": args.inputs, "results": results}
    print(f"\nwrote {write_result('generator', result, started)}")


if __name__ == "__main__":
    main()
