"""End to end: `autorl run` on the embedded model through a real vLLM server, as a user runs it, and
`autorl benchmark` of a run's base model against its latest checkpoint.

The runs share one home, so later runs reuse the inputs and system prompt the first one generated.
"""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from ruler.scores import answer_tokens
from tests.helpers.limits import scaled
from tests.helpers.processes import descendants, wait_gone, with_command_line
from tests.helpers.wandb_records import history as wandb_history

pytestmark = pytest.mark.slow
TASK = "Reply to a customer asking for a refund, politely, in two sentences"
SECRET = "sk-autorl-test-0123456789abcdef-never-write-me"
"""A fake API key in every run's environment: no file a run writes may hold it."""
SECRETS = {"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET, "HF_TOKEN": SECRET}
"""Keys in every run's environment, which no file the run writes may hold."""


def environment() -> dict[str, str]:
    """A run's environment: this process's as it is now (a test's `own_servers` takes out the launcher), and
    `SECRETS`."""
    return {**os.environ, **SECRETS}


SMALL = ["--group-size", "2", "--groups-per-step", "1", "--inputs", "6", "--max-tokens", "24", "--eval-samples", "2",
         "--learnability-groups", "1", "--system-prompt-check", "0"]  # fmt: skip
"""The smallest run that exercises every stage. The system prompt check is off (so the task text is the system
prompt): with the embedded judge its audit says noise after ~2 min of judging; what it does is tested in
test_system_prompt_check.py."""


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("home")


def _foreground_signals() -> None:
    """In the child: take Ctrl-C as a terminal's foreground job does, also when pytest was started in
    the background (`cmd &` in a script ignores SIGINT and SIGQUIT, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


_started: list[subprocess.Popen] = []
"""Every run a test started: one a failed assertion leaves running is killed with its test (`_no_run_outlives`)."""


def autorl(home: Path, name: str, *args: str, task: str = TASK) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "run", task, "--home", str(home), "--name", name, *SMALL, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_foreground_signals,
        env=environment(),
    )
    _started.append(process)
    return process


@pytest.fixture(autouse=True)
def _no_run_outlives():
    """Kill what a test's runs left alive (its vLLM servers die with it): a run left training would slow every
    later test on a 2-core machine until they time out."""
    yield
    while _started:
        process = _started.pop()
        if process.poll() is None:
            children = descendants(process.pid)
            process.kill()
            process.communicate(timeout=scaled(60))
            wait_gone(children, 60)


def finish(process: subprocess.Popen, timeout_s: float = 600) -> str:
    output, _ = process.communicate(timeout=scaled(timeout_s))
    assert process.returncode == 0, output
    return output


def wait_until(process: subprocess.Popen, condition, timeout: float = 600) -> set[int]:
    """Wait for `condition()` while the run is alive; returns the run's processes at that moment."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if condition():
            return descendants(process.pid)
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.5)
    raise AssertionError("timed out")


def server_running(process: subprocess.Popen):
    return lambda: bool(with_command_line(descendants(process.pid), b"vllm"))


def record(home: Path, name: str) -> dict:
    return json.loads((home / "runs" / name / "run.json").read_text())


def steps_in_history(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "history.jsonl").read_text().splitlines()]


@dataclass
class FirstRun:
    output: str
    seconds: float
    server_processes: set[int]
    """The run's processes while its vLLM server ran."""


@pytest.fixture(scope="module")
def first_run(home) -> FirstRun:
    """A two-step run named "first" (with W&B, offline); the other runs reuse its inputs and system prompt."""
    started = time.monotonic()
    process = autorl(home, "first", "--steps", "2")
    children = wait_until(process, server_running(process))
    output = finish(process, timeout_s=900)
    return FirstRun(output, time.monotonic() - started, children)


@pytest.mark.timeout(1200)  # with the first_run fixture, ~350 s on CI's 2 cores
def test_two_step_run_then_a_free_rerun(home, first_run):
    output, first_seconds, children = first_run.output, first_run.seconds, first_run.server_processes
    run_dir = home / "runs" / "first"
    assert (run_dir / "checkpoints" / "0001" / "adapter_model.safetensors").is_file()
    assert (run_dir / "checkpoints" / "0002" / "adapter_model.safetensors").is_file()
    assert steps_in_history(run_dir) == [1, 2]
    assert "step 2/2" in output
    steps = (run_dir / "checkpoints").resolve().parent / "steps"  # in the training directory
    for step in ("0001", "0002"):  # what each step took, for the benchmark's cost column
        cost = json.loads((steps / step / "cost.json").read_text())
        # one group of 2 (SMALL) and its judging (the embedded judge may need a retry): step 1's made in the
        # preflight stage, counted where it trains
        calls = cost["model_calls"]
        assert (
            cost["seconds"] > 0 and calls["policy"] == 2 and calls["judge"] >= 1 and set(calls) == {"policy", "judge"}
        )
    assert not wait_gone(children, 10), "vLLM processes outlived the run"

    # the embedded generator through vLLM: distinct inputs, split apart, a system prompt, every request recorded
    stages, keys = record(home, "first")["stages"], record(home, "first")["keys"]
    rows = [
        json.loads(line)
        for line in (home / "artifacts/inputs" / keys["inputs"] / "inputs.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 6 and len({r["input"] for r in rows}) == 6  # SMALL's --inputs 6
    assert {r["split"] for r in rows} == {"train", "val"} and {r["generator"] for r in rows} == {
        "embedded:smollm2-135m"
    }
    asked = stages["inputs"]["calls"]["generator"]["log"]
    assert len(asked) >= stages["inputs"]["summary"]["generator_calls"] >= 1 and all(
        c["completion_tokens"] for c in asked
    )
    prompt = json.loads((home / "artifacts/system_prompt" / keys["system_prompt"] / "system_prompt.json").read_text())
    # the check is off: the task text is the system prompt, and none is written (nothing trains under a prompt
    # nobody checked)
    assert prompt["system_prompt"] == TASK and stages["system_prompt"]["model_calls"] == 0

    # judged stages record what the judge did and which inputs their figures rest on
    evaluated = stages["evaluate"]["summary"]
    assert evaluated["judging"]["groups"] == evaluated["val_inputs"] > 0
    assert {"base", "latest"} <= evaluated["variants"].keys()
    assert stages["train"]["summary"]["judging"]["groups"] == 1  # one group per step; step 1's judged in preflight
    assert record(home, "first")["server_starts"] >= 1
    # where the time went: the servers' start (before the first stage), each stage's kinds of work
    spent = record(home, "first")["time"]
    assert spent["server starts"] > 0 and spent["training"] > 0 and spent["other"] >= 0
    assert stages["inputs"]["summary"]["time"]["generator"] > 0
    assert stages["baseline"]["summary"]["time"]["policy"] > 0 and stages["evaluate"]["summary"]["time"]["judge"] > 0
    # the judge explains its scores only where the report shows them (evaluate): before that, scores alone
    unexplained = answer_tokens(3, explain=False)  # a group of 2, or 3 with the audit's copy
    for stage in ("baseline", "preflight"):
        assert all(c["completion_tokens"] <= unexplained for c in stages[stage]["calls"]["judge"]["log"]), stage

    # before training: the judge's verdict and the learnability figures, printed and recorded
    checks = stages["preflight"]["summary"]
    assert checks["learnability"]["groups"] == 1 and checks["learnability"]["group_sizes"] == [2]  # step 1's
    audit = checks["audit"]  # step 1's group, then the baseline's one (one validation input)
    assert audit["groups"] == 2 and audit["verdict"] in ("reliable", "noisy", "noise", "uninformative")
    tied = checks["tied_action"]  # when step 1's group ties, a group for every training input (--on-tied drop)
    sampled = tied["judged"] if tied else checks["learnability"]["groups"]
    inputs_checked = int(checks["inputs_check"]["checked"] > 0)  # (reliable:) the inputs, in one request
    assert checks["judging"]["groups"] == sampled + 2 * audit["groups"] + audit["failed"] + inputs_checked
    judge_line, learnability_line = checks["lines"][:2]  # (the progress lines off a terminal come before them)
    assert learnability_line.startswith("learnability: ")
    assert output.index(judge_line) < output.index(learnability_line) < output.index("step 1/2  reward")
    # the sentinel: in the history at step 1 (then every TrainerConfig.drift_every steps: not step 2 of 2), and
    # in evaluate under the base weights served again by vLLM
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert history[0]["kl_to_base"] >= 0 and history[0]["base_logprob"] < 0 and "kl_to_base" not in history[1]
    drift = evaluated["drift"]
    assert drift["base"]["kl_to_base"] < 0.01, drift  # the base model on its own answers, scored as it sampled
    assert drift["latest"]["base_logprob"] < 0 and drift["latest"]["drift_tokens"] > 0

    # the report renders, with the reward curve, and W&B wrote an offline run with the step metrics
    report = (run_dir / "report.md").read_text()
    for section in ("## Task", "## System prompt", "## Before training", "## Validation reward", "| base |",
                    "| latest |", "the judge's noise floor", "Judge verdict: judge ", "## Best", "## Worst",
                    "## Where the time went"):  # fmt: skip
        assert section in report
    assert (run_dir / "reward_curve.png").read_bytes().startswith(b"\x89PNG")
    logged = wandb_history(next((run_dir / "wandb").glob("offline-run-*/run-*.wandb")))
    assert [row["_step"] for row in logged] == [1, 2]
    assert all({"train/reward", "train/loss", "train/grad_norm"} <= row.keys() for row in logged)

    # the same command again: every stage cached, no model call, no server started
    started = time.monotonic()
    rerun = autorl(home, "first", "--steps", "2")
    saw_server = server_running(rerun)
    seen = False
    while rerun.poll() is None:
        seen = seen or saw_server()
        time.sleep(0.2)
    output = finish(rerun)
    rerun_seconds = time.monotonic() - started
    again = record(home, "first")
    assert all(stage["cached"] for stage in again["stages"].values())
    assert sum(stage["model_calls"] for stage in again["stages"].values()) == 0
    assert "model calls this run: 0" in output
    assert not seen, "a fully cached rerun started a vLLM server"
    print(f"\nrerun/first run time: {rerun_seconds:.1f}s / {first_seconds:.1f}s = {rerun_seconds / first_seconds:.3f}")


@pytest.mark.timeout(1500)  # first_run when run alone, then two benchmarks
def test_benchmark_of_the_run_writes_the_tables_and_chart_and_reruns_from_cache(home, first_run, tmp_path):
    """Base model against the run's latest checkpoint, judged by the run's embedded RULER judge."""

    def benchmark() -> str:
        args = ["benchmark", "first", "--variants", "base,first@latest", "--out", str(tmp_path), "--home", str(home)]
        command = [sys.executable, "-m", "pipelines.cli", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=scaled(600), env=environment())
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout + result.stderr

    first = benchmark()
    results = pd.read_csv(tmp_path / "results.csv")
    assert list(results["variant"]) == ["base", "first@latest"] and not results["failed"].any(), first
    assert results.loc[0, "cost_calls"] == 0 and results.loc[1, "cost_calls"] >= 4  # 2 steps of 2 rollouts, judged
    assert results.loc[1, "made_by"] == "2 training steps" and results.loc[1, "cost_s"] > 0
    assert (results["n"] >= 1).all() and results["mean"].between(0, 1).all(), first
    written = {p.name for p in tmp_path.iterdir()}
    assert {"results.md", "results.csv", "winrates.csv", "scores.csv", "scores.png"} <= written
    assert "| first@latest |" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "scores.png").read_bytes()[:4] == b"\x89PNG"
    assert "model calls this run: 0" not in first

    again = benchmark()
    assert "model calls this run: 0" in again
    assert pd.read_csv(tmp_path / "results.csv").equals(results)


PROGRAM_JUDGE = ["--judge", "benchmarks.perf.learning_tasks.judges:uppercase"]
"""A judge that is a program, for runs that test what happens around the judge: no judge server starts."""


KEEP = ["--keep-checkpoints", "latest,best"]
"""ART's checkpoint policy: a run ends with its newest checkpoint and its best (by training reward)."""


@pytest.mark.usefixtures("own_servers")  # looks at the processes the run started
@pytest.mark.timeout(1500)  # ~410 s: two runs and a server restart (and first_run when run alone)
def test_sigkill_during_step_two_then_rerun_resumes_exactly(home, first_run):
    """Killed in step 2, the run resumes at step 2; its server's engine killed in step 3, it loses no step; with
    `--keep-checkpoints latest,best` it ends with exactly those two checkpoints and every step's history."""
    process = autorl(home, "killed", "--steps", "3", "--lr", "3e-5", "--no-wandb", *KEEP, *PROGRAM_JUDGE)

    def in_step_two() -> bool:  # step 1 is checkpointed: step 2's rollouts are under way
        run_file = home / "runs" / "killed" / "run.json"
        keys = json.loads(run_file.read_text()).get("keys") if run_file.exists() else None
        return bool(keys) and (home / "artifacts" / "train" / keys["train"] / "checkpoints/0001").exists()

    children = wait_until(process, in_step_two)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=scaled(60))
    assert not wait_gone(children, 90), "vLLM processes outlived a SIGKILLed run"
    work = home / "artifacts" / "train" / record(home, "killed")["keys"]["train"]
    assert not (work / "checkpoints" / "0002").exists()

    # the resumed run's policy server loses its engine process as step 3's rollouts run (SIGKILL, as the OOM
    # killer picks the largest process): vLLM answers what it holds with HTTP 500 "EngineCore encountered an
    # issue" and exits; the backend restarts the server and sends those requests again: the run loses no step
    resumed = autorl(home, "killed", "--steps", "3", "--lr", "3e-5", "--no-wandb", *KEEP, *PROGRAM_JUDGE)
    train_key = record(home, "killed")["keys"]["train"]

    def engine() -> set[int]:  # the engine of the vLLM server serving the training (merged: under its key)
        servers = with_command_line(descendants(resumed.pid), train_key.encode())
        return {pid for server in servers for pid in with_command_line(descendants(server), b"EngineCore")}

    wait_until(resumed, lambda: (work / "steps" / "0003").exists() and engine())
    for pid in engine():
        os.kill(pid, signal.SIGKILL)
    output = finish(resumed)
    assert "the vLLM server of" in output and "died" in output and "restarting it (1 of at most 3)" in output
    run_dir = home / "runs" / "killed"
    assert steps_in_history(run_dir) == [1, 2, 3]
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    best = max(history, key=lambda h: (h["reward"], h["step"]))["step"]  # ties go to the later step
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == sorted({"0003", f"{best:04d}"})
    evaluated = record(home, "killed")["stages"]["evaluate"]["summary"]["variants"]
    assert evaluated["latest"]["step"] == 3 and evaluated.get("best", {"step": 3})["step"] == best
    # another learning rate and judge than the first run's: its inputs and system prompt are reused (which
    # stages each setting invalidates: tests/test_pipeline_units.py), its training is its own
    stages = record(home, "killed")["stages"]
    assert stages["inputs"]["cached"] and stages["system_prompt"]["cached"]
    assert stages["train"]["cached"] is False


@pytest.mark.usefixtures("own_servers")  # looks at the processes the run started
@pytest.mark.timeout(1200)  # two runs, each with a vLLM start (and first_run when run alone)
def test_an_async_run_killed_in_step_two_resumes_with_the_same_command(home, first_run):
    """`--async 1`: SIGKILLed once step 1 is trained and the pipeline's counts saved, the same command trains
    steps 2 and 3 from step 1's checkpoint, and the counts (`pipeline_state.json`) go on from the first
    invocation's: every step trained one group (`--groups-per-step 1`), none twice."""
    args = ("--steps", "3", "--async", "1", "--no-wandb", *PROGRAM_JUDGE)
    process = autorl(home, "async", *args)

    def counts() -> dict:
        run_file = home / "runs" / "async" / "run.json"
        keys = json.loads(run_file.read_text()).get("keys") if run_file.exists() else None
        state = home / "artifacts" / "train" / keys["train"] / "pipeline_state.json" if keys else None
        return json.loads(state.read_text()) if state and state.exists() else {}

    children = wait_until(process, lambda: counts().get("trained_groups", 0) >= 1)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=scaled(60))
    assert not wait_gone(children, 90), "vLLM processes outlived a SIGKILLed run"
    before = counts()
    output = finish(autorl(home, "async", *args))
    assert "step 3/3" in output and "step 1/3" not in output  # step 1 was not trained again
    assert steps_in_history(home / "runs" / "async") == [1, 2, 3]
    after = counts()
    assert after["trained_groups"] == 3 and after["scenario_offset"] > before["scenario_offset"]
    assert sum(after["staleness"].values()) == 3 and set(after["staleness"]) <= {"0", "1"}


@pytest.mark.usefixtures("own_servers")  # looks at the processes the run started
@pytest.mark.timeout(400)  # a server start, then at most 180 s + 90 s of waiting
def test_ctrl_c_stops_the_run_and_its_server(home):
    process = autorl(home, "interrupted", "--steps", "50", "--lr", "4e-5", "--no-wandb", *PROGRAM_JUDGE)
    children = wait_until(process, server_running(process))
    os.kill(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=scaled(180))
    assert process.returncode == 1
    assert "interrupted; rerun the same command to resume" in output
    assert not wait_gone(children, 90), "vLLM processes outlived Ctrl-C"
    assert record(home, "interrupted")["status"] == "interrupted"


@pytest.mark.usefixtures("own_servers")  # looks at the processes the run started
@pytest.mark.timeout(600)  # ~230 s on CI: the generator's server start
def test_sigterm_while_inputs_are_generated_stops_the_run_and_its_servers_at_once(home):
    """SIGTERM (what schedulers and containers send) stops a run as Ctrl-C does, also while the input
    generator's worker threads wait on model calls."""
    from autorl.serving.embedded import cache_dir

    # a new inputs stage, long enough to be stopped in (4 inputs a request, ~6 s a request on 2 cores)
    process = autorl(home, "terminated", "--steps", "1", "--seed", "7", "--no-wandb", "--inputs", "400")
    generator_log = cache_dir() / "logs" / f"embedded-vllm-{process.pid}.log"

    def generating() -> bool:  # vLLM logs its throughput every 10 s while requests run
        return generator_log.exists() and "Avg generation throughput" in generator_log.read_text(errors="replace")

    children = wait_until(process, generating)
    stages = record(home, "terminated").get("stages", {})
    assert "inputs" not in stages, "the inputs stage finished before the test could stop it"
    os.kill(process.pid, signal.SIGTERM)
    output, _ = process.communicate(timeout=20)  # asked for: within 10 s; the margin is for a loaded machine
    assert process.returncode == 1
    assert "interrupted; rerun the same command to resume" in output
    assert not wait_gone(children, 10), "vLLM processes outlived SIGTERM"
    assert record(home, "terminated")["status"] == "interrupted"


NOTES_SERVER = Path(__file__).resolve().parents[1] / "pipelines" / "tasks" / "notes_agent" / "notes_server.py"
UNIT_TOOLS = Path(__file__).resolve().parents[1] / "pipelines" / "tasks" / "unit_tools.py"
NOTES_TASK = f"""
description = "Help the user keep notes: save what they ask with add_note, find notes with search_notes, then confirm."
system_prompt = "You keep the user's notes. Save them with add_note, find them with search_notes, then confirm."
inputs_file = "inputs.jsonl"
max_turns = 2

[[mcp_servers]]
command = ["python", {json.dumps(str(NOTES_SERVER))}]
env = {{ NOTES_DB = ":memory:", NOTES_TOKEN = "{SECRET}" }}

[[tools]]
name = "convert"
function = {json.dumps(str(UNIT_TOOLS) + ":convert")}
"""
NOTES_INPUTS = [
    ("Save a note that the plumber comes Thursday at 9am.", "train"),
    ("Remember that the wifi password is on the fridge.", "train"),
    ("Note down: buy oat milk and eggs.", "train"),
    ("What did I save about the plumber?", "train"),
    ("Save a note: dentist on Monday at 3pm.", "val"),
    ("Find my note about the wifi.", "val"),
]


@pytest.mark.timeout(600)  # ~150 s on 2 cores: a server start, baseline, one step, evaluate
def test_a_task_with_an_mcp_server_and_a_python_tool_runs_end_to_end(home, tmp_path):
    """The notes agent's stdio MCP server (pipelines/tasks/notes_agent) and the `convert` Python function
    behind every rollout of a run, with the task's own system prompt and inputs (no generator), judged by a
    program: the run finishes, the agent was offered both kinds of tool, and the server is gone afterwards."""
    (tmp_path / "notes.toml").write_text(NOTES_TASK)
    (tmp_path / "inputs.jsonl").write_text(
        "".join(json.dumps({"input": i, "split": s}) + "\n" for i, s in NOTES_INPUTS)
    )
    judge = ["--judge", "benchmarks.perf.learning_tasks.judges:tool_call"]
    unused = ["--generator", f"unused@http://autorl:{SECRET}@127.0.0.1:9/v1"]  # the task brings its prompt and inputs
    process = autorl(home, "notes", "--steps", "1", *judge, *unused, task=str(tmp_path / "notes.toml"))
    servers = wait_until(process, lambda: bool(with_command_line(descendants(process.pid), b"notes_server.py")))
    output = finish(process)
    assert steps_in_history(home / "runs" / "notes") == [1], output
    stages = record(home, "notes")["stages"]
    assert stages["system_prompt"]["model_calls"] == 0 and stages["inputs"]["model_calls"] == 0
    evaluated = home / "artifacts" / "evaluate" / record(home, "notes")["keys"]["evaluate"] / "groups.jsonl"
    offered = {tool["function"]["name"] for line in evaluated.read_text().splitlines()
               for trajectory in json.loads(line)["trajectories"] for tool in trajectory["tools"]}  # fmt: skip
    assert {"add_note", "search_notes", "list_notes", "convert"} <= offered
    assert not wait_gone(with_command_line(servers, b"notes_server.py"), 10), "the MCP server outlived the run"
    recorded = record(home, "notes")  # names kept, values not: the MCP token, the URL's password
    assert recorded["task"]["mcp_servers"][0]["env"] == {"NOTES_DB": "<redacted>", "NOTES_TOKEN": "<redacted>"}
    assert recorded["config"]["generator"] == "unused@http://<redacted>@127.0.0.1:9/v1"
    written = [p for p in (home / "runs" / "notes").rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.suffix == ".wandb" for p in written) and not [p for p in written if SECRET.encode() in p.read_bytes()]


@pytest.mark.timeout(1200)  # first_run when run alone; seconds otherwise
def test_no_file_a_run_wrote_holds_the_api_key(home, first_run):
    """Artifacts, logs, reports, parquet and W&B files of every run in the home (and the embedded
    servers' logs): the key in the environment appears in none of them, nor (after the notes run) its MCP
    server's token or the password of its generator's URL, which its run.json and W&B config name redacted."""
    from autorl.serving.embedded import cache_dir

    files = [p for p in [*home.rglob("*"), *(cache_dir() / "logs").glob("*")] if p.is_file() and not p.is_symlink()]
    suffixes = {p.suffix for p in files}
    assert {".json", ".jsonl", ".parquet", ".md", ".wandb", ".log"} <= suffixes, suffixes
    assert [p for p in files if SECRET.encode() in p.read_bytes()] == []
