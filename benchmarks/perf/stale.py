"""Which results in `benchmarks/perf/results/` are stale: a file of the code they measure changed since.

    python benchmarks/perf/stale.py            # the table
    python benchmarks/perf/stale.py --check    # also: exit 1 when the docs quote a stale result

`MEASURES` (below, the one place) names for every result the script that writes it and the code it measures
(files, or folders ending in "/"). The commit a result measured is its `commit` field (written by
`_common.write_result`: `{sha, dirty}`). A result measured on a clean checkout measured that commit. A
result without the field, or measured on uncommitted changes, is taken to have measured the commit that
committed it (the one that last changed the file's content, a pure rename not counting), and any change
to its code committed between the measurement (`measured_at`, or the recorded sha) and that commit counts
as a change since: nobody knows whether it was measured. A result git knows nothing of (never committed,
no usable `commit` field) is "unknown", which counts as stale.

Stale = a measured file differs between the measured commit and HEAD (a pure rename does not count, nor a
Python file whose code is the same: only its docstrings, comments or layout changed, so a docstring's figure
can be brought up to date without making its result stale), or changed in that window (any change there
counts). Uncommitted edits are not looked at: commit, then check.

A result's file changed only in its `notes` (the history of a measurement, `NOTES`) still measured what it
measured: such a commit is not "the commit that committed it".

The docs site renders every result it shows from its file at build time, with this rule's verdict on the row
(docs/hooks.py), so a stale figure there says so. README.md and examples/README.md are not built: they quote a
result when a paragraph (text between blank lines) names its file, `results/NAME.json`, or a family of files
it belongs to (`results/learning_content_TASK_sSEED.json`, `results/learning_ablation_capitals_*`: `QUOTE`), and
`--check` exits 1 while such a quote, or one typed in a page of `docs/` rather than drawn by the build, is stale.
No wording exempts a quote: re-measure it (`benchmarks/perf/remeasure.py`).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pipelines.artifacts import code_text

PERF = Path(__file__).resolve().parent
ROOT = PERF.parents[1]
NOTES = "notes"
"""A result's field of prose about the measurement (what was seen, what changed since): not a measurement."""


@dataclass(frozen=True)
class Measures:
    """What a result measures: the script that writes it and the code whose change makes it stale."""

    script: str
    code: tuple[str, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.script, *self.code)


SERVING = ("autorl/serving/",)
LOCAL_BACKEND = (
    "autorl/backends/base.py",
    "autorl/backends/model_backend.py",
    "autorl/backends/local.py",
    "autorl/backends/transport.py",
    "autorl/model.py",
)
TRAINING = ("autorl/training/", "autorl/config.py", "autorl/trajectories.py")
CLUSTER = ("autorl/backends/cluster/",)
LEARNING = ("benchmarks/perf/learning_tasks/",)
STEP_SETUP = ("benchmarks/perf/perf_grpo_step.py", "benchmarks/perf/perf_rollout.py")
"""The GRPO step and rollout set-up `scaling.py` borrows."""
EVERYTHING = ("autorl/", "ruler/", "pipelines/")
"""A whole `autorl run`: every layer."""

MEASURES: dict[str, Measures] = {
    "rollout": Measures("benchmarks/perf/perf_rollout.py", (*SERVING, *LOCAL_BACKEND, "autorl/agents/rollout.py")),
    "grpo_step": Measures(
        "benchmarks/perf/perf_grpo_step.py",
        (*SERVING, *LOCAL_BACKEND, *TRAINING, "autorl/backends/run_dir.py", "ruler/"),
    ),
    **{
        name: Measures("benchmarks/perf/perf_server_start.py", SERVING)
        for name in ("server_start", "server_start_eager")
    },
    "merged_reload": Measures("benchmarks/perf/perf_merged_reload.py", SERVING),
    "shared_cores": Measures("benchmarks/perf/perf_shared_cores.py", SERVING),
    "convert": Measures("benchmarks/perf/perf_convert.py", ("autorl/serving/embedded.py",)),
    "cost_of_a_run": Measures(
        "benchmarks/perf/cost_of_a_run.py", ("pipelines/costs.py", "pipelines/records/pricing.py")
    ),
    "cost_of_the_readme_run": Measures(
        "benchmarks/perf/cost_of_a_run.py", ("pipelines/costs.py", "pipelines/records/pricing.py")
    ),
    "cost_of_a_content_run": Measures(
        "benchmarks/perf/cost_of_a_run.py", ("pipelines/costs.py", "pipelines/records/pricing.py")
    ),
    "cost_of_a_benchmark": Measures(
        "benchmarks/perf/cost_of_a_run.py",
        ("pipelines/costs.py", "pipelines/records/pricing.py", "pipelines/benchmarking/"),
    ),
    "judge_tokens": Measures("benchmarks/perf/perf_judge_tokens.py", ("ruler/prompt.py", "ruler/rubric.py")),
    "first_run": Measures("benchmarks/perf/perf_first_run.py", EVERYTHING),
    "first_run_judge_timing": Measures("benchmarks/perf/perf_first_run.py", EVERYTHING),  # --baseline 62f018e
    "first_run_cold": Measures("benchmarks/perf/perf_first_run.py", EVERYTHING),  # --cold (fresh caches)
    "first_run_cold_diag": Measures("benchmarks/perf/perf_first_run.py", EVERYTHING),  # --cold, this checkout alone
    "first_run_cold_amx": Measures("benchmarks/perf/perf_first_run.py", EVERYTHING),  # --cold, on a CPU with AMX
    "remote": Measures("benchmarks/perf/perf_remote.py", ("autorl/backends/remote/", *LOCAL_BACKEND, *TRAINING)),
    "generator": Measures("benchmarks/perf/perf_generator.py", ("autorl/inputs/", *SERVING, "ruler/endpoint.py")),
    "replicas": Measures(
        "benchmarks/perf/perf_replicas.py",
        ("benchmarks/perf/perf_grpo_step.py", *CLUSTER, *SERVING, *LOCAL_BACKEND, *TRAINING),
    ),
    "judge_replicas": Measures("benchmarks/perf/perf_judge_replicas.py", (*CLUSTER, *SERVING, "ruler/")),
    "replica_simulation": Measures("benchmarks/perf/replica_simulation.py", ("autorl/backends/cluster/routing.py",)),
    **{  # the default parts, and the `steps` part alone over 200 steps (memory over a long run)
        name: Measures("benchmarks/perf/scaling.py", (*STEP_SETUP, *SERVING, *LOCAL_BACKEND, *TRAINING, "ruler/"))
        for name in ("scaling", "scaling_200_steps")
    },
    "server_dtype": Measures("benchmarks/perf/perf_server_dtype.py", (*SERVING, "autorl/cpu.py")),
    "sentinel": Measures("benchmarks/perf/perf_sentinel.py", TRAINING),
    "sentinel_calibration": Measures("benchmarks/perf/sentinel_calibration.py", ("pipelines/sentinel.py",)),
    "merge_thread": Measures(
        "benchmarks/perf/perf_merge_thread.py",
        (
            *TRAINING,
            "autorl/serving/merge.py",
            "benchmarks/perf/perf_trainer_attention.py",
            "benchmarks/perf/perf_grpo_step.py",
        ),
    ),
    "trainer_attention": Measures(
        "benchmarks/perf/perf_trainer_attention.py", (*TRAINING, "benchmarks/perf/perf_grpo_step.py")
    ),
    "trainer_memory": Measures(
        "benchmarks/perf/perf_trainer_memory.py",
        (*TRAINING, "benchmarks/perf/perf_trainer_attention.py", "benchmarks/perf/perf_grpo_step.py"),
    ),
    **{  # one request at a time, and --concurrency 8 --out structured_output_concurrent (a judge audit's load)
        name: Measures(
            "benchmarks/perf/perf_structured_output.py",
            (
                *SERVING,
                "autorl/inputs/generation.py",
                "autorl/inputs/generator.py",
                "ruler/prompt.py",
                "ruler/scores.py",
            ),
        )
        for name in ("structured_output", "structured_output_concurrent")
    },
    "faults": Measures("benchmarks/perf/faults.py", ("tests/helpers/processes.py", *LEARNING, *EVERYTHING)),
    "learning": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)),
    "learning_dapo_cispo": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)),
    "learning_regression": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)),
    "learning_regression_capitals": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)),
    "learning_regression_capitals_text": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)),
    "learning_regression_capitals_text10": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)),
    **{  # examples/capitals_text.toml at the defaults, 20 steps: the README's "see it learn"
        f"learning_text_capitals_s{seed}": Measures(
            "benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING, "examples/capitals_text.toml", "examples/judges.py")
        )
        for seed in range(3)
    },
    **{  # one seed of the README's task and of a strict one again after dynamic sampling's changes (033ddc9,
        # bd113d0: the tie spread in sampling, set-aside inputs drawn when too few are left): learning unchanged?
        name: Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING, *files))
        for name, files in (
            ("learning_check_capitals_text_s0", ("examples/capitals_text.toml", "examples/judges.py")),
            ("learning_check_strict20_arithmetic_s0", ()),
        )
    },
    **{  # the tie search against dynamic sampling alone (issue 71; `-- --tie-search 0`: tiesearch0), equal budget
        f"learning_{variant}_{task}_s{seed}": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING))
        for variant in ("tiesearch", "tiesearch0")
        for task in ("arithmetic", "capitals")
        for seed in range(3)
    },
    # tic-tac-toe from its text, the warm-up from the policy's own won games (issue 56, item 3)
    "learning_tool_tictactoe_text_s0": Measures(
        "benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING, "examples/tictactoe.py")
    ),
    "learning_grpo": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)),  # one_word, uppercase
    **{  # the content tasks at the defaults, one result file per task and seed (learning.py --out)
        f"learning_content_{task}_s{seed}": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING))
        for task in ("arithmetic", "capitals", "opposites", "alphabetical", "extract_json", "tictactoe")
        for seed in range(3)
    },
    **{  # the strict tasks from their task text alone (issue 55; learning.py --out); _examples: after worked
        # examples could come from any answer that scored (76eaf49); _rl and _bootstrap: RL alone against the
        # `--sft-bootstrap` warm-up and fewer RL steps, at equal sampled answers
        f"learning_strict_{task}{examples}_s{seed}": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING))
        for task in ("arithmetic", "capitals", "opposites", "alphabetical", "extract_json")
        for examples in ("", "_examples", "_rl", "_bootstrap")
        for seed in range(3)
    },
    **{  # the strict tasks at 20 steps, three seeds (issue 55, item 5), and two of them from their one-line
        # description alone (the generator writes the questions)
        name: Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING))
        for seed in range(3)
        for name in (
            *(
                f"learning_strict20_{task}_s{seed}"
                for task in ("arithmetic", "capitals", "opposites", "alphabetical", "extract_json")
            ),
            *(f"learning_described_{task}_s{seed}" for task in ("arithmetic", "capitals")),
        )
    },
    **{  # tic-tac-toe with a tool that keeps the board per rollout (issue 56, item 3), judged as the example and
        # on its result alone (_strict)
        f"learning_tool_tictactoe_cell{strict}_s{seed}": Measures(
            "benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING, "examples/tictactoe.py")
        )
        for seed in range(3)
        for strict in ("", "_strict")
    },
    **{  # tic-tac-toe after an SFT warm-up on examples/tictactoe_sft.jsonl (one epoch, three)
        f"learning_content_tictactoe_{warmup}_s0": Measures(
            "benchmarks/perf/learning.py", ("examples/tictactoe_sft.jsonl", *LEARNING, *EVERYTHING)
        )
        for warmup in ("sft", "sft3")
    },
    **{  # the tool-only fact task from its text (issue 56; learning.py --out), at the defaults and with the first
        # turn's call required (`-- --tool-choice required`), required with strict tools (`--strict-tools`), that
        # with forced tokens' logprobs unknown to training (`_forced`), and part of each group forced (`_share`;
        # `_share40`: 40 steps); `_fn` and `_mcp`: the same settings side by side, the tool as a function and from
        # a stdio MCP server (directory_mcp.toml, directory_server.py); `_nearer40`: 40 steps under the judge that
        # credits a wrong call's name by its nearness to the asked one
        f"learning_tool_directory{required}_s{seed}": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING))
        for required in ("", "_required", "_strict", "_forced", "_share", "_share40", "_fn", "_mcp", "_nearer40")
        for seed in range(3)
    },
    **{  # capitals by --async 1 --ray local --trainer-workers 2 (issue 45's parity with the synchronous loop)
        f"learning_async{claims}_capitals_s{seed}": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING))
        for seed in range(3)
        for claims in ("", "_claims")  # before and after PipelineTrainer's claim limit
    },
    **{  # capitals with one run default changed (learning.py --out; issue 42's "what each default costs")
        f"learning_ablation_capitals_{change}_s{seed}": Measures(
            "benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING)
        )
        for change in ("defaults", "lr1e-4", "lr1e-3", "gs4", "temp0.7", "kl0.1")
        for seed in range(2)
    },
    **{  # group size 4 on the other content tasks
        f"learning_ablation_{task}_gs4_s0": Measures("benchmarks/perf/learning.py", (*LEARNING, *EVERYTHING))
        for task in ("extract_json", "opposites", "arithmetic")
    },
    "async_throughput": Measures(
        "benchmarks/perf/perf_async.py",
        (
            *CLUSTER,
            *SERVING,
            *LOCAL_BACKEND,
            *TRAINING,
            "autorl/pipeline_trainer.py",
            "autorl/pipeline_gate.py",
            "pipelines/stages/train.py",
        ),
    ),
    **{  # base answers' tool calls, vLLM's parser against the agent loop's reading (tool_calls.py --out)
        name: Measures(
            "benchmarks/perf/tool_calls.py",
            (*SERVING, "autorl/agents/", "autorl/task.py", *LEARNING, "pipelines/stats.py"),
        )
        for name in ("tool_calls_directory", "tool_calls_directory_strict")
    },
    "learn_tool_use": Measures("benchmarks/perf/learn_tool_use.py", (*LEARNING, "pipelines/tasks/", *EVERYTHING)),
    "preflight": Measures("benchmarks/perf/preflight_checks.py", (*LEARNING, *EVERYTHING)),
    "prompt_vs_rl": Measures(
        "benchmarks/perf/prompt_vs_rl.py", ("benchmarks/perf/learning.py", *LEARNING, *EVERYTHING)
    ),
    "gpu_check": Measures("benchmarks/perf/gpu_check.py", (*SERVING, *LOCAL_BACKEND, *TRAINING, *LEARNING)),
}
"""Result name (`results/NAME.json`) -> what it measures; `benchmarks/tests/test_stale.py` checks that every results file
and every script that writes one has an entry."""


@dataclass(frozen=True)
class Status:
    """One result's row: the commit it measured (None: unknown), how that was decided, and what changed since."""

    name: str
    sha: str | None
    basis: str
    """"recorded" (the result's `commit`), "git log" (the commit that committed it), "git log, dirty" (that
    commit, the result having been measured on uncommitted changes to its recorded one), or why it is unknown."""
    date: str
    cpu: str
    changed: tuple[str, ...]
    since: str | None
    """The oldest commit after the measurement that changed a measured file (None if none or unknown)."""

    @property
    def stale(self) -> bool:
        return self.sha is None or bool(self.changed)


def git(root: Path, *args: str) -> str | None:
    """`git ARGS` in `root`: its stdout, or None when git fails (an unknown commit, not a repository)."""
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def _measured(path: str, measures: Measures) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in measures.paths)


def committed_with(root: Path, result: Path) -> str | None:
    """The commit that last changed `result`'s measurement (a pure rename, R100, does not count, nor a change of
    its `NOTES` alone); None if never committed."""
    log = git(root, "log", "--follow", "--name-status", "--format=commit %H", "--", str(result.relative_to(root)))
    sha = None
    for line in (log or "").splitlines():
        if line.startswith("commit "):
            sha = line.split()[1]
        elif line and sha and not line.startswith("R100"):
            status, *paths = line.split("\t")
            before = git(root, "show", f"{sha}^:{paths[0]}") if status[0] in "MR" else None
            after = git(root, "show", f"{sha}:{paths[-1]}")
            if before is None or after is None or measurement(before) != measurement(after):
                return sha
    return None


def measurement(text: str) -> object:
    """A result file's content without its `NOTES`: what was measured (text that is not JSON, as it is)."""
    try:
        record = json.loads(text)
    except ValueError:
        return text
    return {k: v for k, v in record.items() if k != NOTES} if isinstance(record, dict) else record


def changed_files(root: Path, base: str, measures: Measures) -> list[str]:
    """Measured files that differ between `base` and HEAD, pure renames left out, and Python files whose code
    is the same (only docstrings, comments or layout changed: `same_code`)."""
    head = git(root, "rev-parse", "HEAD") or "HEAD"
    changed = []
    for status, *paths in _diff(root, base, head):
        if status == "R100" or not _measured(paths[-1], measures):
            continue
        before = _show(root, base, paths[0]) if status[0] in "MR" else None
        after = _show(root, head, paths[-1])
        if not (paths[-1].endswith(".py") and before is not None and after is not None and same_code(before, after)):
            changed.append(paths[-1])
    return changed


def first_code_change(root: Path, base: str, paths: list[str]) -> str | None:
    """The oldest commit after `base` at which one of `paths` (files `changed_files` found) no longer has
    the code it had at `base`: a commit that changed only docstrings or comments is passed over."""
    commits = (git(root, "log", "--reverse", "--format=%H", f"{base}..HEAD", "--", *paths) or "").split()
    for sha in commits:
        for path in paths:
            before, after = _show(root, base, path), _show(root, sha, path)
            if before is None or after is None or (before != after and not same_code(before, after)):
                return sha
    return next(iter(commits), None)


@functools.cache
def _diff(root: Path, base: str, head: str) -> tuple[tuple[str, ...], ...]:
    """`git diff --name-status -M` between two commits, a tuple per line (status, paths): many results share a
    base, and a commit's diff never changes (a build or a check asks each once)."""
    diff = git(root, "diff", "--name-status", "-M", base, head) or ""
    return tuple(tuple(line.split("\t")) for line in diff.splitlines())


@functools.cache
def _show(root: Path, commit: str, path: str) -> str | None:
    """A file as `commit` has it (None where it has none); cached: a commit's files never change."""
    return git(root, "show", f"{commit}:{path}")


@functools.cache
def same_code(before: str, after: str) -> bool:
    """Whether two versions of a Python file are the same program: the same syntax tree once every string
    statement (module, class, function and attribute docstrings) is left out, as the pipeline's cache keys
    read code (`pipelines.artifacts.code_text`). A version that does not parse is not the same."""
    try:
        return code_text(before) == code_text(after)
    except SyntaxError:
        return False


def window_files(root: Path, revisions: list[str], measures: Measures) -> tuple[list[str], str | None]:
    """Measured files changed by the commits `revisions` (a rev-list range), and the oldest such commit."""
    log = git(root, "log", "--reverse", "--format=commit %H", "--name-only", *revisions, "--", *measures.paths) or ""
    files, first = [], None
    for line in log.splitlines():
        if line.startswith("commit "):
            first = first or line.split()[1]
        elif line and _measured(line, measures):
            files.append(line)
    return files, first


def status(root: Path, name: str, measures: Measures, results: Path) -> Status:
    """Whether `results/NAME.json` is stale against HEAD of the repository at `root`."""
    path = results / f"{name}.json"
    record = json.loads(path.read_text())
    machine = record.get("machine") or {}
    cpu = machine.get("cpu", "?") + (" (AMX)" if (machine.get("cpu_flags") or {}).get("amx_bf16") else "")
    measured_at = record.get("measured_at")
    recorded = record.get("commit") or {}
    sha = recorded.get("sha")
    if sha and git(root, "cat-file", "-e", f"{sha}^{{commit}}") is None:
        sha = None  # a commit this repository does not have (rebased away, another clone)
    committed = committed_with(root, path)
    window: list[str] = []
    if sha and not recorded.get("dirty"):
        base, basis = sha, "recorded"
    elif committed and sha and git(root, "merge-base", "--is-ancestor", sha, committed) is not None:
        base, basis = committed, "git log, dirty"
        window = [f"{sha}..{committed}^"] if committed != sha else []
    elif committed and not sha:
        base, basis = committed, "git log"
        first_parent = git(root, "rev-parse", "--verify", "--quiet", f"{committed}^")
        if measured_at and first_parent:
            window = [f"--since={measured_at}", first_parent]
    else:
        unknown = "measured on uncommitted changes" if sha else "never committed, no commit recorded"
        return Status(name, None, unknown, (measured_at or "")[:10], cpu, (), None)
    changed = changed_files(root, base, measures)
    since = first_code_change(root, base, changed) if changed else None
    if window:
        earlier, first = window_files(root, window, measures)
        changed = [*dict.fromkeys([*earlier, *changed])]
        since = first or since
    date = measured_at or git(root, "log", "-1", "--format=%cI", base) or ""
    return Status(name, base, basis, date[:10], cpu, tuple(changed), since)


def statuses(root: Path = ROOT, measures: dict[str, Measures] = MEASURES) -> list[Status]:
    """A `Status` per results file of `root`'s `benchmarks/perf/results/` (an unmapped one raises KeyError)."""
    results = root / "benchmarks" / "perf" / "results"
    return [status(root, p.stem, measures[p.stem], results) for p in sorted(results.glob("*.json"))]


QUOTE = re.compile(r"results/([A-Za-z0-9_*]+)(\.json)?")
"""A result named in the docs: `results/NAME.json`, or a family of them, with placeholders in capitals
(`results/learning_content_TASK_sSEED.json`) or a `*` (`results/learning_ablation_capitals_*`)."""


def quoted(readme: str, names: list[str]) -> set[str]:
    """The results of `names` the text quotes: named, or matched by a family's pattern (`QUOTE`)."""
    found: set[str] = set()
    for paragraph in re.split(r"\n\s*\n", readme):
        for quote, suffix in QUOTE.findall(paragraph):
            if not suffix and "*" not in quote:
                continue  # a folder or a word, not a result
            pattern = re.sub(r"[A-Z]+", "[a-z0-9._]+", re.escape(quote).replace(r"\*", ".*"))
            found.update(name for name in names if re.fullmatch(pattern, name))
    return found


DRAWN = re.compile(r"<!--\{\{\s*\w+\(\s*\"([A-Za-z0-9_*]+)\"")
"""A figure README.md draws from a result (`docs/hooks.py`'s `FIGURE`: the macro in a comment, then its text)."""


def drawn(readme: str, names: list[str]) -> set[str]:
    """The results of `names` whose figures a page not built by the docs (README.md) draws (`DRAWN`)."""
    patterns = [re.escape(name).replace(r"\*", ".*") for name in DRAWN.findall(readme)]
    return {name for name in names if any(re.fullmatch(pattern, name) for pattern in patterns)}


def doc_pages(root: Path) -> list[Path]:
    """The pages that may quote results as typed text: README.md, examples/README.md and every Markdown page
    under `docs/` (whose figures the build draws from the results; one typed there is a quote all the same)."""
    pages = [root / "README.md", root / "examples" / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [page for page in pages if page.exists()]


def print_statuses(rows: list[Status], quotes: set[str]) -> None:
    header = ("result", "measured commit", "date", "machine CPU", "stale", "first changed file", "in docs")
    table = [header]
    for row in rows:
        if row.sha is None:
            stale = f"yes ({row.basis})"
        elif row.changed:
            more = f" (+{len(row.changed) - 1} more)" if len(row.changed) > 1 else ""
            stale = "yes"
            first = f"{row.changed[0]}{more}, since {row.since[:9] if row.since else '?'}"
        else:
            stale, first = "no", "-"
        if row.sha is None:
            first = "-"
        commit = "unknown" if row.sha is None else f"{row.sha[:9]} ({row.basis})"
        table.append((row.name, commit, row.date, row.cpu, stale, first, "quoted" if row.name in quotes else "-"))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, cells in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * width for width in widths))


def main(argv: list[str] | None = None, root: Path = ROOT, measures: dict[str, Measures] = MEASURES) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the docs quote a stale result")
    args = parser.parse_args(argv)
    rows = statuses(root, measures)
    names = [row.name for row in rows]
    quotes = quoted("\n\n".join(page.read_text() for page in doc_pages(root)), names)
    quotes |= drawn("\n\n".join(p.read_text() for p in doc_pages(root) if p.name == "README.md"), names)
    print_statuses(rows, quotes)
    bad = [row.name for row in rows if row.stale and row.name in quotes]
    if args.check and bad:
        print(
            f"stale results quoted in README.md, examples/README.md or docs/: {', '.join(bad)}; re-measure them "
            "(python benchmarks/perf/remeasure.py --only NAME)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
