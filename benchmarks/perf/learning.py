"""Does a run make the model better? Base vs trained held-out reward on tasks a program judges.

    python benchmarks/perf/learning.py [--tasks arithmetic,capitals,opposites,alphabetical,extract_json,tictactoe]
        [--losses grpo] [--seeds 0] [--steps 20] [--home DIR] [--out NAME] [-- extra autorl run flags]

Two kinds of task. The content tasks (`CONTENT_TASKS`, the default) are judged on what the answer says:
the sum, the capital, the opposite, the words in order, the fields extracted, a won game; the strict tasks
(`STRICT_TASKS`) are five of them from their task text alone, without the hand-written system prompt and its
worked example, judged on the answer alone that the text asks for (what a user's judge often is), and two of them
from their description alone (`DESCRIBED_TASKS`: the questions written by the run's generator); the tool tasks
(`TOOL_TASKS`: `directory`, a made-up staff directory's phone extensions) ask for a fact only their tool knows,
from the task text alone, judged against the tool's truth with partial credit for the right call; the form-only
tasks (`FORM_TASKS`: one word, capitals, no punctuation, exclamations) are judged on the answer's shape
alone and are probes of reward hacking: training reaches their top score with answers that say nothing.

For each task (a task file in `benchmarks/perf/learning_tasks/` or `examples/`, its judge `judges:<task>`,
its inputs file with fixed train/validation splits), each loss and each seed, this runs `autorl run
TASK.toml --judge benchmarks.perf.learning_tasks.judges:<task> --loss LOSS --seed SEED --steps N` as a user
would, with the run's defaults for everything else, and reads its `run.json`: the held-out mean reward
of the base model and of the trained LoRA (latest checkpoint), each with its 95% CI over the validation
inputs, both judged by the same program in the `evaluate` stage, and the time of the train stage; the
preflight stage's judge verdict and learnability figures; the sentinel's figures (the trained answers'
KL to the base model and their base log-likelihood per token against the base model's own answers, on
the validation answers and per step); a few trained answers to read, and every held-out answer of the base
model and of the trained LoRA as a count of each distinct answer and its score (`answers`).
The base model's answers come from the `baseline` stage, shared by the runs of a task (cached by
content, as are the inputs and the system prompt). Runs are kept under `--home` (default
`.autorl-learning`): a rerun reuses finished runs and continues killed ones.

Prints a table and writes `benchmarks/perf/results/learning.json` (`--out` names another file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import EXAMPLES, LEARNING_JUDGES, LEARNING_TASKS, ROOT, summary, write_result

from autorl.backends.run_dir import read_history
from pipelines.stats import mean_ci, sign_flip_p

CONTENT_TASKS = ("arithmetic", "capitals", "opposites", "alphabetical", "extract_json", "tictactoe")
"""Tasks whose judge checks the content of the answer (the first two and the game are `examples/` tasks)."""
STRICT_TASKS = (
    "arithmetic_strict",
    "capitals_strict",
    "opposites_strict",
    "alphabetical_strict",
    "extract_json_strict",
)
"""The zero-data case: content tasks from their text alone (no system prompt, no worked example), each judged
strictly on the answer alone that its text asks for."""
DESCRIBED_TASKS = ("arithmetic_described", "capitals_described")
"""Zero data to the letter: two strict tasks from their one-line description alone, no inputs file either (the
run's generator writes the questions), judged on what the text asks in whatever wording the questions come."""
TOOL_TASKS = (
    "directory", "directory_mcp", "tictactoe_text", "tictactoe_cell", "tictactoe_cell_strict", "email_search",
)  # fmt: skip
"""Tasks whose answer only a tool knows, from their task text alone (no system prompt, no worked call): the model
must find the tool and use what it returns across turns (`directory_mcp`: the same tool from a stdio MCP server;
`tictactoe_text`: the example's game without its system prompt and worked call; `tictactoe_cell`: the same
with a tool that keeps the board itself, so a move names only its cell; `tictactoe_cell_strict`: that game
judged on its result alone; `email_search`: ART•E's shape, two calls in a row, a search of a synthetic mailbox then
reading the message found, judged per turn as well, `examples/email_search.py`)."""
FORM_TASKS = ("one_word", "uppercase", "no_punctuation", "exclaim")
"""Probes of reward hacking: their judges score the form of an answer only."""
LOSSES = ("grpo", "dr_grpo", "gspo")


def task_file(task: str) -> Path:
    """The task file of `task`: the benchmark's own, else the example of that name."""
    own = LEARNING_TASKS / f"{task}.toml"
    return own if own.exists() else EXAMPLES / f"{task}.toml"


def judge_spec(task: str) -> str:
    return f"{LEARNING_JUDGES}:{task}"


def run_command(task: str, loss: str, seed: int, steps: int, home: Path, extra: list[str]) -> list[str]:
    """The `autorl run` command line of one benchmark run."""
    return [
        sys.executable, "-m", "pipelines.cli", "run", str(task_file(task)),
        "--judge", judge_spec(task), "--loss", loss, "--seed", str(seed), "--steps", str(steps),
        "--home", str(home), "--name", f"{task}-{loss}-seed{seed}", "--no-wandb", *extra,
    ]  # fmt: skip


def one_run(
    task: str, loss: str, seed: int, steps: int, home: Path, extra: list[str], timeout_s: float | None = None
) -> dict:
    """Run one task/loss/seed to the end (within `timeout_s`, when given, else it is stopped); its figures
    from run.json."""
    command = run_command(task, loss, seed, steps, home, extra)
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        output = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise SystemExit(f"{' '.join(command[3:])} did not finish in {timeout_s:.0f} s:\n{output[-3000:]}") from None
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[3:])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    record = json.loads((home / "runs" / command[command.index("--name") + 1] / "run.json").read_text())
    variants = record["stages"]["evaluate"]["summary"]["variants"]
    train = record["stages"]["train"]
    history = read_history(home / "runs" / record["name"])
    last = train["summary"].get("sft_steps", 0) + steps  # RL's `steps` follow a warm-up's steps
    history = [h for h in history if "reward" in h and h["step"] <= last]  # RL's steps, not an SFT warm-up's
    return {
        "task": task,
        "loss": loss,
        "seed": seed,
        "steps": steps,
        "base": _figure(variants["base"]),
        "trained": _figure(variants["latest"]),
        "gain": round(variants["latest"]["mean"] - variants["base"]["mean"], 4),
        "paired": paired_gain(home, record),
        "train_s": None if train["cached"] else train["seconds"],  # a cached rerun has not timed it
        "wall_s": round(time.monotonic() - started, 1),
        "rl_steps": len(history),  # `steps`: an SFT warm-up's steps (`-- --sft-file`) come before them
        "train_reward_first_last": [history[0]["reward"], history[-1]["reward"]],
        # the system prompt's candidates and their mean scores on training inputs (the task text's is the base
        # model's before bootstrapping), and which was kept
        "system_prompt": record["stages"]["system_prompt"]["summary"].get("check"),
        "preflight": preflight_figures(record["stages"]["preflight"]["summary"]),
        "sentinel": sentinel_figures(record["stages"]["evaluate"]["summary"], history),
        "pipeline": pipeline_counts(home, record),
        "sampling": sampling_figures(home, record, history),
        "trained_answers": trained_answers(home, record),
        "answers": answer_counts(home, record),  # every held-out answer, counted: "N of 32" is computed from it
    }


def pipeline_counts(home: Path, record: dict) -> dict | None:
    """An `--async N` run's group counts (`PipelineTrainer`'s pipeline_state.json): trained groups by staleness
    (policy versions behind), and those dropped stale or tied; None for a synchronous run."""
    state = home / "artifacts" / "train" / record["keys"]["train"] / "pipeline_state.json"
    if not state.exists():
        return None
    counts = json.loads(state.read_text())
    keep = ("trained_groups", "staleness", "stale_groups", "tied_groups", "failed_groups", "scenario_offset")
    return {k: counts[k] for k in keep}


def sampling_figures(home: Path, record: dict, history: list[dict]) -> dict:
    """What the steps' sampling spent and found (`steps/NNNN/sampling.json`, `pipelines.sampling`): the RL steps
    that trained no group (every group tied), the answers sampled in all, the tie search's rounds and the inputs
    it searched, and the inputs done (every answer at the top score)."""
    steps = home / "artifacts" / "train" / record["keys"]["train"] / "steps"
    records = [json.loads(path.read_text()) for path in sorted(steps.glob("*/sampling.json"))]
    return {
        "steps_training_nothing": sum(h.get("groups_trained", 1) == 0 for h in history),
        "answers": sum(r["answers"] for r in records),
        "search_rounds": sum(sum(r.get("searched", {}).values()) for r in records),
        "inputs_searched": sum(len(r.get("searched", {})) for r in records),
        "done": sorted({text for r in records for text in r.get("done", [])}),
    }


def preflight_figures(checks: dict) -> dict:
    """The judge audit's and the learnability check's figures of a run (`pipelines/stages/preflight.py`);
    `{"off": True}` for a run with `--preflight off`."""
    if checks.get("off"):
        return {"off": True}
    audit, signal = checks["audit"], checks["learnability"]
    keep = ("verdict", "groups", "answers", "rejudge_gap", "answer_spread", "reliability", "position_effect",
            "duplicate_gap", "attempts")  # fmt: skip
    return {
        "audit": {k: audit[k] for k in keep},
        "learnability": signal,
        "tied_action": checks.get("tied_action"),
        "lines": checks["lines"],
    }


def sentinel_figures(evaluated: dict, history: list[dict]) -> dict:
    """How far the trained answers lie from the base model's: on the validation answers (evaluate) and per
    training step (the first and the last), rounded."""
    drift = evaluated["drift"]

    def rounded(values: dict) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}

    return {
        "validation": {variant: rounded(values) for variant, values in drift.items()},
        "logprob_vs_base": round(drift["latest"]["base_logprob"] - drift["base"]["base_logprob"], 4),
        "kl_to_base": round(drift["latest"]["kl_to_base"], 4),
        "per_step": [{k: h.get(k) for k in ("step", "reward", "kl_to_base", "base_logprob")} for h in history],
    }


def paired_gain(home: Path, record: dict) -> dict:
    """The latest checkpoint's gain over the base model input by input (each input's mean over its answers,
    inputs both scored): its mean, 95% bootstrap CI, and the one-sided p-value of the paired sign-flip test
    (`pipelines.stats.sign_flip_p`), over the evaluate stage's scores."""
    import pandas as pd

    scores = pd.read_parquet(home / "artifacts" / "evaluate" / record["keys"]["evaluate"] / "scores.parquet")
    means = scores.pivot_table(index="input", columns="variant", values="reward", aggfunc="mean")
    differences = list((means["latest"] - means["base"]).dropna())
    gain, low, high = mean_ci(differences)
    return {"gain": round(gain, 4), "ci": [round(low, 4), round(high, 4)], "p": sign_flip_p(differences)}


def trained_answers(home: Path, record: dict, count: int = 6) -> list[str]:
    """A few of the trained model's validation answers (the evaluate stage's latest), as they were written."""
    import pandas as pd

    scores = pd.read_parquet(home / "artifacts" / "evaluate" / record["keys"]["evaluate"] / "scores.parquet")
    return scores[scores["variant"] == "latest"]["answer"].head(count).tolist()


def answer_counts(home: Path, record: dict) -> dict[str, list[dict]]:
    """Every held-out answer of each evaluated variant (base, latest), as a count of each distinct answer and
    score: what "N of 32 right" is computed from (`counted`), rather than typed from a few answers read."""
    import pandas as pd

    scores = pd.read_parquet(home / "artifacts" / "evaluate" / record["keys"]["evaluate"] / "scores.parquet")
    return counted(scores[["variant", "answer", "reward"]].to_dict("records"))


def counted(rows: list[dict]) -> dict[str, list[dict]]:
    """`rows` ({variant, answer, reward}) as variant -> [{answer, reward, count}], the most frequent first."""
    counts: dict[str, dict[tuple[str, float], int]] = {}
    for row in rows:
        key = (str(row["answer"]), round(float(row["reward"]), 4))
        variant = counts.setdefault(row["variant"], {})
        variant[key] = variant.get(key, 0) + 1
    return {
        variant: [
            {"answer": answer, "reward": reward, "count": n}
            for (answer, reward), n in sorted(found.items(), key=lambda item: (-item[1], item[0]))
        ]
        for variant, found in counts.items()
    }


def _figure(variant: dict) -> dict:
    return {key: round(variant[key], 4) for key in ("mean", "ci_low", "ci_high")} | {"inputs": variant["inputs"]}


def print_table(runs: list[dict]) -> None:
    header = ("task", "loss", "seed", "base [95% CI]", "trained [95% CI]", "gain", "CI clear", "paired p", "judge", "signal",
              "KL to base", "base ll vs base", "steps", "train s")  # fmt: skip
    rows = [header] + [
        (
            r["task"],
            r["loss"],
            str(r["seed"]),
            _cell(r["base"]),
            _cell(r["trained"]),
            f"{r['gain']:+.3f}",
            "yes" if r["trained"]["ci_low"] > r["base"]["ci_high"] else "no",
            f"{r['paired']['p']:.4f}" if "paired" in r else "-",
            "off" if r["preflight"].get("off") else r["preflight"]["audit"]["verdict"],
            "off"
            if r["preflight"].get("off")
            else "{groups_with_signal}/{groups}".format(**r["preflight"]["learnability"]),
            f"{r['sentinel']['kl_to_base']:.3f}",
            f"{r['sentinel']['logprob_vs_base']:+.3f}",
            str(r["steps"]),
            "cached" if r["train_s"] is None else f"{r['train_s']:.0f}",
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)))
        if i == 0:
            print("  ".join("-" * width for width in widths))


def _cell(figure: dict) -> str:
    return f"{figure['mean']:.3f} [{figure['ci_low']:.3f}, {figure['ci_high']:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(CONTENT_TASKS), help="Comma-separated task names.")
    parser.add_argument("--losses", default="grpo", help=f"Comma-separated loss variants ({', '.join(LOSSES)}, ...).")
    parser.add_argument("--seeds", default="0", help="Comma-separated seeds (one run each).")
    parser.add_argument("--steps", type=int, default=20, help="Training steps per run.")
    parser.add_argument("--home", type=Path, default=Path(".autorl-learning"), help="Where the runs are kept.")
    parser.add_argument("--out", default="learning", help="Result name: writes benchmarks/perf/results/OUT.json.")
    parser.add_argument("extra", nargs="*", help="More `autorl run` flags, after `--`.")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    started = time.monotonic()
    runs = []
    for task in args.tasks.split(","):
        for loss in args.losses.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                runs.append(one_run(task, loss, seed, args.steps, args.home.resolve(), args.extra))
                print(f"{task} {loss} seed {seed}: base {runs[-1]['base']['mean']:.3f} -> trained "
                      f"{runs[-1]['trained']['mean']:.3f} ({runs[-1]['wall_s']:.0f} s)", flush=True)  # fmt: skip
    print()
    print_table(runs)
    gains = [r["gain"] for r in runs]
    better = sum(r["gain"] > 0 for r in runs)
    clear = sum(r["trained"]["ci_low"] > r["base"]["ci_high"] for r in runs)
    print(f"\ntrained > base in {better}/{len(runs)} runs ({clear} with CIs apart); "
          f"gain median {statistics.median(gains):+.3f} (min {min(gains):+.3f}, max {max(gains):+.3f})")  # fmt: skip
    command = ["python", "benchmarks/perf/learning.py", *sys.argv[1:]]
    path = write_result(args.out, {"command": command, "gain": summary(gains), "runs": runs}, started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
