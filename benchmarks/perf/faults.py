"""Fault injection: what an `autorl run` on the embedded model survives, with figures.

    python benchmarks/perf/faults.py [--trials 20] [--scenarios sigkill,server_death,judge_outage,disk_full,two_runs]
        [--home DIR] [--seed 0] [--out faults]

Every run is `autorl run` as a user types it: the learning benchmark's `one_word` task (its inputs
file, its program judge), 3 steps, 4 rollouts per step, each trial a new learning rate, so that each
trains from scratch while the inputs, system prompt and baseline are computed once and shared (cached).

- sigkill: a reference run measures how long a run takes; each trial kills its run (SIGKILL, the whole
  autorl process) at a seeded random moment within that time, checks that no vLLM server outlives it,
  reruns the command and checks: steps 1..3 each exactly once in history.jsonl, every artifact complete
  (manifest written last) or absent, no temporary left beside one.
- server_death: the policy's vLLM server is SIGKILLed as step 2 starts; the run must restart it and end
  with steps 1..3. Time to recover: from the kill to the next step written.
- judge_outage: the judge is RULER on the embedded model behind a proxy that refuses connections for
  30 s as step 2 starts, then answers 429 for 20 s; the run must end with steps 1..3 and no group lost
  to the outage (50 s of it, within the judge's `RetryPolicy.outage_s` of 120 s).
- disk_full: the home is a size-limited tmpfs (root only), nearly full: the run must stop with one
  DiskFullError line and no half-written file, then finish when the same command is rerun after space
  is freed.
- two_runs: a second `autorl run` on the name of a running one is refused at once with one line; the
  first finishes.

Prints a table (scenario, trials, outcome, data lost, time to recover) and writes
`benchmarks/perf/results/<out>.json`; every run's output is kept in `HOME/fault-logs/`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from _common import LEARNING_JUDGES, LEARNING_TASKS, ROOT, summary, write_result

from autorl.backends.run_dir import read_history
from autorl.training.checkpoints import METRICS_FILE
from tests.helpers.processes import command_lines, descendants, wait_gone, with_command_line

TASK = LEARNING_TASKS / "one_word.toml"
JUDGE = f"{LEARNING_JUDGES}:one_word"
STEPS = 3
SETTINGS = ["--steps", str(STEPS), "--group-size", "4", "--groups-per-step", "1", "--max-tokens", "16",
            "--eval-samples", "2", "--no-wandb"]  # fmt: skip
SCENARIOS = ("sigkill", "server_death", "judge_outage", "disk_full", "two_runs")
OUTAGE_S = 30
STORM_429_S = 20
_RUN_NUMBERS = itertools.count(1)


def command(home: Path, name: str, lr: float, judge: str = JUDGE) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "run", str(TASK), "--home", str(home), "--name", name,
            "--judge", judge, "--lr", repr(lr), *SETTINGS]  # fmt: skip


def start(home: Path, name: str, lr: float, judge: str = JUDGE) -> subprocess.Popen:
    """Start `autorl run`, its output going to a log of its own under HOME/fault-logs/."""
    log = home / "fault-logs" / f"{next(_RUN_NUMBERS):03d}-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen(command(home, name, lr, judge), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    process.log = log  # read by finish
    return process


def finish(process: subprocess.Popen, timeout: float = 1800) -> tuple[int, str]:
    """Wait for a run started by `start`: its exit code and its output."""
    process.wait(timeout)
    return process.returncode, process.log.read_text(errors="replace")


def record(home: Path, name: str) -> dict:
    path = home / "runs" / name / "run.json"
    return json.loads(path.read_text()) if path.exists() else {}


def train_dir(home: Path, name: str) -> Path | None:
    keys = record(home, name).get("keys")
    return home / "artifacts" / "train" / keys["train"] if keys else None


def wait_for(process: subprocess.Popen, condition: Callable[[], bool], timeout: float = 1200) -> bool:
    """Wait until `condition()` holds while `process` runs; False when the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.2)
    raise TimeoutError("condition not reached")


def step_started(home: Path, name: str, step: int) -> Callable[[], bool]:
    return lambda: (d := train_dir(home, name)) is not None and (d / "steps" / f"{step:04d}").exists()


def history_steps(home: Path, name: str) -> list[int]:
    directory = train_dir(home, name)
    return [h["step"] for h in read_history(directory)] if directory else []


def artifact_problems(home: Path, name: str) -> list[str]:
    """What is wrong on disk after run `name` stopped: a stage its run.json records as done (computed or found
    cached) whose artifact has no manifest (written last), a checkpoint without its metrics, a temporary left
    anywhere under the artifacts. A stage the run skipped (sft without --sft-file: its entry says `skipped`)
    writes no artifact, and one it never reached (a run stopped by a full disk) has no entry: neither is
    incomplete. Every stage has a key in run.json from the start, so the keys alone would report both."""
    problems = [f"temporary {p.relative_to(home)}" for p in (home / "artifacts").rglob(".*") if p.name != ".lock"]
    run = record(home, name)
    for stage, entry in run.get("stages", {}).items():
        summary = entry.get("summary") or {}
        if "skipped" in summary or "stopped" in summary:  # nothing computed / a budget stop inside the stage
            continue
        key = run.get("keys", {}).get(stage)
        if key is None or not (home / "artifacts" / stage / key / "artifact.json").is_file():
            problems.append(f"incomplete {stage}/{key}")
    if (directory := train_dir(home, name)) is not None:
        for checkpoint in (directory / "checkpoints").iterdir():
            if not (checkpoint / METRICS_FILE).is_file():
                problems.append(f"checkpoint {checkpoint.relative_to(home)}")
    return problems


def stage_at(home: Path, name: str) -> str:
    """The stage a run was in: the first without an entry in run.json (steps: the train stage's step)."""
    from pipelines.config import STAGES

    done = record(home, name).get("stages", {})
    stage = next((s for s in STAGES if s not in done), "finished")
    if stage == "train" and (directory := train_dir(home, name)) is not None:
        steps = sorted(p.name for p in (directory / "steps").glob("[0-9]*")) if (directory / "steps").exists() else []
        stage += f" step {int(steps[-1])}" if steps else " (starting)"
    return stage


class Trials:
    """One scenario's trials: outcomes, losses and recovery times."""

    def __init__(self, scenario: str):
        self.scenario, self.ok, self.trials, self.lost, self.left, self.recover_s = scenario, 0, 0, 0, 0, []
        self.notes: list[str] = []

    def add(self, ok: bool, lost: int, left: int, recover_s: float | None, note: str) -> None:
        self.trials += 1
        self.ok += ok
        self.lost += lost
        self.left += left
        if recover_s is not None:
            self.recover_s.append(recover_s)
        self.notes.append(note)
        print(f"  {self.scenario} trial {self.trials}: {'ok' if ok else 'FAILED'} — {note}", flush=True)

    def row(self, outcome: str) -> dict:
        return {
            "scenario": self.scenario, "trials": self.trials, "passed": self.ok,
            "outcome": f"{self.ok}/{self.trials} {outcome}", "data_lost": self.lost, "servers_left": self.left,
            "recover_s": summary(self.recover_s) if self.recover_s else None, "trial_notes": self.notes,
        }  # fmt: skip


class Learning:
    """A distinct learning rate per run (and per `--seed`), so each run trains anew while the upstream
    stages stay cached in the home, also across invocations with different seeds."""

    def __init__(self, seed: int) -> None:
        self.seed, self.count = seed, 0

    def next(self) -> float:
        self.count += 1
        return 1e-4 + (self.seed * 1000 + self.count) * 1e-7


def reference(home: Path, lrs: Learning) -> float:
    """A full run (computing the shared upstream stages), then a second one timed: a run's duration."""
    for name in (f"reference-warmup-s{lrs.seed}", f"reference-s{lrs.seed}"):
        started = time.monotonic()
        code, output = finish(start(home, name, lrs.next()))
        if code != 0:
            raise SystemExit(f"the reference run failed:\n{output[-3000:]}")
        print(f"  {name}: {time.monotonic() - started:.0f} s", flush=True)
    return time.monotonic() - started


def sigkill(home: Path, trials: int, duration: float, rng: random.Random, lrs: Learning) -> dict:
    result = Trials("sigkill")
    for trial in range(trials):
        name, lr = f"killed-s{lrs.seed}-{trial}", lrs.next()
        process = start(home, name, lr)
        delay = rng.uniform(0, duration)
        deadline = time.monotonic() + delay
        servers: set[int] = set()
        while time.monotonic() < deadline and process.poll() is None:
            servers |= set(descendants(process.pid))
            time.sleep(0.1)
        servers |= set(descendants(process.pid))
        phase = stage_at(home, name)
        process.kill()
        process.wait()
        survivors = wait_gone(servers, 90)
        left = len(survivors)
        left_names = command_lines(survivors)  # a survivor may end meanwhile: not a crash of the benchmark
        started = time.monotonic()
        code, output = finish(start(home, name, lr))
        recover = time.monotonic() - started
        steps = history_steps(home, name)
        problems = artifact_problems(home, name)
        ok = code == 0 and steps == list(range(1, STEPS + 1)) and not problems and not left
        lost = 0 if steps == list(range(1, STEPS + 1)) else 1
        note = f"killed at {delay:.0f} s in {phase}; resume {recover:.0f} s, steps {steps}"
        note += f"; left running 90 s after the kill: {left_names}" if left else ""
        result.add(ok, lost + len(problems), left, recover, note + (f"; {problems}" if problems else "")
                   + ("" if code == 0 else f"; resume failed: {output[-500:]}"))  # fmt: skip
    return result.row("resumed to steps 1..3, artifacts complete")


def server_death(home: Path, trials: int, lrs: Learning) -> dict:
    result = Trials("server_death")
    for trial in range(trials):
        name = f"server-death-s{lrs.seed}-{trial}"
        process = start(home, name, lrs.next())
        wait_for(process, step_started(home, name, 2))
        victims = with_command_line(descendants(process.pid), train_dir(home, name).name.encode())  # merged: its key
        killed_at = time.monotonic()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        wait_for(process, lambda name=name: len(history_steps(home, name)) >= 2)
        recover = time.monotonic() - killed_at
        code, output = finish(process)
        steps = history_steps(home, name)
        ok = code == 0 and steps == list(range(1, STEPS + 1)) and "restarting it" in output and bool(victims)
        result.add(ok, 0 if steps == list(range(1, STEPS + 1)) else 1, 0, recover,
                   f"killed {len(victims)} server process(es) in step 2; step 2 done {recover:.0f} s later; "
                   f"steps {steps}")  # fmt: skip
    return result.row("restarted the server, steps 1..3")


class FlakyProxy:
    """An HTTP proxy to the embedded judge server that can refuse connections (port closed) for a while
    and then answer 429 for a while. It sends the server's `key` on (the run it serves knows only this URL)."""

    def __init__(self, target: str, key: str):
        self.target, self.storm_until, self.forwarded, self.rate_limited = target, 0.0, 0, 0
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if time.monotonic() < proxy.storm_until:
                    proxy.rate_limited += 1
                    status, data = 429, b'{"error": {"message": "rate limited (fault injection)"}}'
                else:
                    proxy.forwarded += 1
                    reply = httpx.post(proxy.target + self.path.removeprefix("/v1"), content=body,
                                       headers=headers, timeout=600)  # fmt: skip
                    status, data = reply.status_code, reply.content
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.handler, self.http, self.port = Handler, None, 0
        self.listen()

    def listen(self) -> None:
        self.http = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        self.http.daemon_threads = True
        self.port = self.http.server_port
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()

    def outage(self, seconds: float, storm_s: float) -> None:
        """Close the port for `seconds`, then answer 429 for `storm_s` seconds."""
        self.http.shutdown()
        self.http.server_close()
        time.sleep(seconds)
        self.storm_until = time.monotonic() + storm_s
        self.listen()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def judge_outage(home: Path, lrs: Learning) -> dict:
    from autorl.serving.embedded import embedded_endpoint

    result = Trials("judge_outage")
    endpoint = embedded_endpoint()  # this process's embedded server: RULER on the embedded model
    proxy = FlakyProxy(endpoint.base_url, endpoint.api_key.get_secret_value())
    try:
        name = f"judge-outage-s{lrs.seed}"
        judge = f"{endpoint.model}@http://127.0.0.1:{proxy.port}/v1"
        process = start(home, name, lrs.next(), judge)
        wait_for(process, step_started(home, name, 2))
        proxy.outage(OUTAGE_S, STORM_429_S)
        code, output = finish(process)
        steps = history_steps(home, name)
        judging = record(home, name).get("stages", {}).get("train", {}).get("summary", {}).get("judging", {})
        dropped = judging.get("failed", 0)
        ok = code == 0 and steps == list(range(1, STEPS + 1)) and dropped == 0
        result.add(ok, dropped + (steps != list(range(1, STEPS + 1))), 0, None,
                   f"port closed {OUTAGE_S} s in step 2, then 429 for {STORM_429_S} s ({proxy.rate_limited} "
                   f"requests); steps {steps}; judging {judging}"
                   + ("" if code == 0 else f"; failed: {output[-500:]}"))  # fmt: skip
    finally:
        proxy.close()
    return result.row(f"survived a {OUTAGE_S} s outage and a {STORM_429_S} s 429 storm: steps 1..3, no group lost")


def disk_full(home: Path, lrs: Learning) -> dict:
    result = Trials("disk_full")
    disk = home.parent / f"{home.name}-tmpfs"
    disk.mkdir(exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(disk)]).returncode:
        return {"scenario": "disk_full", "trials": 0, "outcome": "skipped: mounting a tmpfs needs root"}
    try:
        for stage in ("inputs", "system_prompt", "baseline"):  # the shared upstream artifacts: cache hits
            shutil.copytree(home / "artifacts" / stage, disk / "artifacts" / stage)
        free = os.statvfs(disk)
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (free.f_bavail * free.f_frsize - 12 * 2**20))  # 12 MiB left
        lr = lrs.next()
        code, output = finish(start(disk, "full", lr))
        line = next((x for x in output.splitlines() if "disk full" in x), "")
        problems = artifact_problems(disk, "full")  # the stages it finished complete, the rest never begun
        filler.unlink()
        started = time.monotonic()
        code2, output2 = finish(start(disk, "full", lr))
        rerun_error = "" if code2 == 0 else f"; the rerun failed: {output2[-300:]}"
        steps = history_steps(disk, "full")
        ok = code == 1 and line.startswith("error: disk full while writing") and not problems and code2 == 0
        ok = ok and steps == list(range(1, STEPS + 1))
        result.add(ok, len(problems), 0, time.monotonic() - started,
                   f"stopped with {line!r}; after freeing space the rerun ended with steps {steps}"
                   + (f"; {problems}" if problems else "") + rerun_error)  # fmt: skip
    finally:
        if (disk / "fault-logs").is_dir():  # the runs' output, kept beside the other scenarios' logs
            shutil.copytree(disk / "fault-logs", home / "fault-logs", dirs_exist_ok=True)
        subprocess.run(["umount", "-l", str(disk)])
    return result.row("one error line, nothing half-written, rerun finished")


def two_runs(home: Path, lrs: Learning) -> dict:
    result = Trials("two_runs")
    lr = lrs.next()
    name = f"twice-s{lrs.seed}"
    first = start(home, name, lr)
    wait_for(first, lambda: record(home, name).get("status") == "running")
    started = time.monotonic()
    code, output = finish(start(home, name, lr), timeout=120)
    refused_s = time.monotonic() - started
    code_first, _ = finish(first)
    line = output.strip().splitlines()[-1] if output.strip() else ""
    ok = code == 1 and f"run {name!r} is in use by process" in line and code_first == 0
    result.add(ok, 0, 0, None, f"second refused after {refused_s:.1f} s: {line!r}; first exited {code_first}")
    return result.row("second refused with one line, first finished")


def print_table(rows: list[dict]) -> None:
    header = ("scenario", "trials", "outcome", "data lost", "servers left", "time to recover (median [min, max])")
    table = [header]
    for r in rows:
        recover = r.get("recover_s")
        recover_text = f"{recover['median']:.0f} s [{recover['min']:.0f}, {recover['max']:.0f}]" if recover else "-"
        table.append((r["scenario"], str(r["trials"]), r["outcome"], str(r.get("data_lost", "-")),
                      str(r.get("servers_left", "-")), recover_text))  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * width for width in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="SIGKILL trials.")
    parser.add_argument("--server-death-trials", type=int, default=2)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--home", type=Path, default=Path(".autorl-faults"))
    parser.add_argument("--seed", type=int, default=0, help="Seed of the kill moments and the runs' learning rates.")
    parser.add_argument("--out", default="faults")
    args = parser.parse_args()
    home, rng, lrs, started = args.home.resolve(), random.Random(args.seed), Learning(args.seed), time.monotonic()
    scenarios = args.scenarios.split(",")
    print("reference runs (the shared stages, then a run's duration)", flush=True)
    duration = reference(home, lrs)
    rows = []
    for scenario in scenarios:
        print(scenario, flush=True)
        if scenario == "sigkill":
            rows.append(sigkill(home, args.trials, duration, rng, lrs))
        elif scenario == "server_death":
            rows.append(server_death(home, args.server_death_trials, lrs))
        elif scenario == "judge_outage":
            rows.append(judge_outage(home, lrs))
        elif scenario == "disk_full":
            rows.append(disk_full(home, lrs))
        elif scenario == "two_runs":
            rows.append(two_runs(home, lrs))
        else:
            raise SystemExit(f"unknown scenario {scenario!r}; scenarios are {', '.join(SCENARIOS)}")
    print()
    print_table(rows)
    command_line = ["python", "benchmarks/perf/faults.py", *sys.argv[1:]]
    path = write_result(args.out, {"command": command_line, "run_seconds": round(duration, 1), "scenarios": rows},
                        started)  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
