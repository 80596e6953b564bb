"""`autorl benchmark`: statistics on fixed data, variant names and their errors, bad input files, and a
benchmark against a fake OpenAI-compatible server on 127.0.0.1 beside an endpoint that is down."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from autorl.errors import AutoRLError
from pipelines.artifacts import ArtifactStore
from pipelines.benchmarking.scoreboard import Outcome, markdown_table, per_input_scores, results_table, win_rates
from pipelines.benchmarking.variants import Cost, RunView, parse_variants, read_input_texts, resolve
from pipelines.cli import app
from pipelines.stats import mean_ci
from tests.helpers.benchmark_runs import PROMPT, VAL, benchmark, make_run
from tests.helpers.cli import error_line
from tests.helpers.judge_server import FakeJudgeServer, Reply


@pytest.fixture
def home(tmp_path) -> Path:
    make_run(tmp_path)
    return tmp_path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# statistics on fixed data


def test_bootstrap_ci_on_fixed_data():
    mean, low, high = mean_ci([0.0, 1.0] * 50)
    assert mean == 0.5 and 0.39 < low < 0.45 and 0.55 < high < 0.61  # normal approximation: 0.5 ± 0.098
    assert mean_ci([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))
    assert mean_ci([0.2, 0.4, 0.9]) == mean_ci([0.2, 0.4, 0.9])  # seeded: the same data give the same interval


def test_win_rates_count_ties_as_half_over_shared_inputs():
    scores = pd.DataFrame(
        {
            "a": [1.0, 0.5, 0.8, 0.7, 0.9],
            "b": [0.0, 0.5, 0.9, 0.1, np.nan],  # input 5: b has no score, so a-vs-b uses inputs 1-4
            "c": [0.1 + 0.2, 0.5, 0.8, 0.7, 0.9],
            "d": [np.nan] * 5,
        },
        index=[f"i{n}" for n in range(1, 6)],
    )
    scores.loc["i1", "a"] = 0.3  # a ties c on i1 (0.3 vs 0.1 + 0.2) and on every other input
    wins = win_rates(scores)
    assert wins.loc["a", "b"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)  # win, tie, loss, win
    assert wins.loc["b", "a"] == pytest.approx((0 + 0.5 + 1 + 0) / 4)
    assert wins.loc["a", "c"] == 0.5 and wins.loc["c", "a"] == 0.5
    assert np.isnan(wins.loc["a", "a"]) and wins.loc["d"].isna().all() and wins["d"].isna().all()


def test_results_table_averages_answers_per_input_and_flags_failed_variants():
    frame = pd.DataFrame(
        {
            "input": ["x", "x", "y", "z", "x", "y"],
            "variant": ["a", "a", "a", "a", "b", "b"],
            "reward": [1.0, 0.0, 1.0, 0.5, 0.2, 0.4],
        }
    ).assign(answer="", explanation="")
    outcomes = {
        "a": Outcome(answered=3, inputs=3),
        "b": Outcome(answered=2, inputs=3, errors=["APITimeoutError: Request timed out."]),
        "down": Outcome(answered=0, inputs=3, errors=["APIConnectionError: Connection error."] * 3),
    }
    table = results_table(frame, outcomes).set_index("variant")
    assert list(table.index) == ["a", "b", "down"]
    assert table.loc["a", "mean"] == pytest.approx(2 / 3) and table.loc["a", "n"] == 3
    assert tuple(table.loc["a", ["mean", "ci_low", "ci_high"]]) == pytest.approx(mean_ci([0.5, 1.0, 0.5]))
    assert table.loc["b", "n"] == 2 and not table.loc["b", "failed"] and "1 requests failed" in table.loc["b", "error"]
    assert table.loc["down", "failed"] and np.isnan(table.loc["down", "mean"]) and table.loc["down", "n"] == 0
    assert "Connection error" in table.loc["down", "error"]
    wins = win_rates(per_input_scores(frame, ["a", "b", "down"]))
    assert wins.loc["a", "b"] == 1.0 and wins.loc["b", "a"] == 0.0
    costs = {"b": Cost(96, 41.5, "bootstrap (tuned)"), "down": Cost(None, None, "20 training steps", None)}
    table = results_table(frame, outcomes, costs).set_index("variant")
    assert list(table["cost_calls"].fillna(-1)) == [0, 96, -1] and table.loc["b", "cost_s"] == 41.5
    assert (
        np.isnan(table.loc["down", "cost_s"])
        and np.isnan(table.loc["down", "cost_usd"])
        and table.loc["down", "made_by"] == "20 training steps"
    )
    markdown = markdown_table(results_table(frame, outcomes, costs))
    assert (
        "| down | — | — | — | 0 | — | — | — | 20 training steps | yes | APIConnectionError: Connection error. |"
        in markdown
    )


# variant names


def test_variants_resolve_to_the_base_model_checkpoints_prompts_and_endpoints(home):
    main = RunView(home, "r", Counter())
    runs = {"r": main}
    base = resolve("base", main, runs)
    assert (base.run, base.step, base.system_prompt, base.identity["lora"]) == (main, 0, PROMPT, None)
    assert resolve("r@latest", main, runs).step == 2
    assert resolve("r@best", main, runs).step == 1  # step 1 had the higher training reward
    assert (
        resolve("r@1", main, runs).identity
        == resolve("r@0001", main, runs).identity
        != resolve("r@2", main, runs).identity
    )
    prompt = home / "terse.txt"
    prompt.write_text("Be terse.\n")
    assert resolve(f"r@latest+prompt={prompt}", main, runs).system_prompt == "Be terse."
    api = resolve("m@http://127.0.0.1:9/v1", main, runs)
    assert (api.run, api.api.model, api.api.base_url, api.system_prompt) == (None, "m", "http://127.0.0.1:9/v1", PROMPT)
    make_run(home, "other", rewards=(0.1,))
    assert resolve("other@latest", main, runs).run is runs["other"]


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("nope", "variant 'nope' resolves to nothing; use base, RUN@latest"),
        ("r@0009", "variant 'r@0009': run 'r' has no checkpoint 0009 (checkpoints: 0001, 0002)"),
        ("r@soon", "variant 'r@soon': 'soon' is not a checkpoint; use latest, best or a step (run 'r' has 0001, 0002)"),
        ("ghost@latest", "variant 'ghost@latest': no run named 'ghost'"),
        ("empty@best", "variant 'empty@best': run 'empty' has no checkpoints yet"),
        ("base+prompt=missing.txt", "variant 'base+prompt=missing.txt': system prompt file missing.txt does not exist"),
        ("nosuchprovider/model-x", "variant 'nosuchprovider/model-x' resolves to nothing (no known LiteLLM provider"),
    ],
)
def test_a_variant_that_resolves_to_nothing_names_what_exists(home, label, message):
    make_run(home, "empty", rewards=())
    main = RunView(home, "r", Counter())
    with pytest.raises(AutoRLError) as error:
        resolve(label, main, {"r": main})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_variant_lists_and_input_files(tmp_path):
    assert parse_variants(" base, r@latest ,") == ["base", "r@latest"]
    with pytest.raises(AutoRLError, match="variant 'base' is given twice"):
        parse_variants("base,base")
    with pytest.raises(AutoRLError, match="--variants is empty"):
        parse_variants(" , ")
    path = tmp_path / "inputs.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(AutoRLError, match="has no inputs"):
        read_input_texts(path)
    path.write_text('{"input": "a"}\n{"text": "b"}\n')
    with pytest.raises(AutoRLError, match=r"inputs.jsonl:2: expected a JSON object"):
        read_input_texts(path)
    path.write_text('{"input": "a", "split": "train"}\n\n{"input": "b"}\n{"input": "a"}\n')
    assert read_input_texts(path) == ["a", "b"]
    with pytest.raises(AutoRLError, match="does not exist"):
        read_input_texts(tmp_path / "missing.jsonl")


# the command


def test_bad_input_ends_in_one_error_line(home):
    assert "run 'r' has no checkpoint 0009 (checkpoints: 0001, 0002)" in error_line(
        benchmark(home, "--variants", "base,r@0009")
    )
    result = CliRunner().invoke(app, ["benchmark", "ghost", "--home", str(home)])
    assert "no run named 'ghost'" in error_line(result) and "(runs: r)" in error_line(result)
    empty = home / "empty.jsonl"
    empty.write_text("")
    assert "has no inputs" in error_line(benchmark(home, "--inputs", str(empty)))
    assert "--samples" in benchmark(home, "--samples", "0").output


def test_a_down_endpoint_fails_alone_and_a_rerun_asks_no_model(home):
    judge = home / "judges.py"
    judge.write_text('def says_42(messages):\n    return 1.0 if "42" in messages[-1]["content"] else 0.0\n')
    terse = home / "terse.txt"
    terse.write_text("Reply with one number.")
    out = home / "bench"
    with FakeJudgeServer() as server:
        server.script.extend(Reply(content="It is 42.") for _ in range(2 * len(VAL)))
        fake, down = f"fake@{server.base_url}", f"down@http://127.0.0.1:{closed_port()}/v1"
        args = ["--variants", f"{fake},{fake}+prompt={terse},{down}", "--judge", f"{judge}:says_42", "--out", str(out)]
        first = benchmark(home, *args)
        assert first.exit_code == 0, first.output
        assert len(server.requests) == 2 * len(VAL)
        assert {r["messages"][0]["content"] for r in server.requests} == {PROMPT, "Reply with one number."}
        results = pd.read_csv(out / "results.csv").set_index("variant")
        assert list(results.index) == [fake, f"{fake}+prompt={terse}", down]
        assert list(results["mean"][:2]) == [1.0, 1.0] and list(results["n"]) == [3, 3, 0]
        assert list(results["failed"]) == [False, False, True] and "APIConnectionError" in results.loc[down, "error"]
        wins = pd.read_csv(out / "winrates.csv", index_col=0)
        assert wins.loc[fake, f"{fake}+prompt={terse}"] == 0.5 and np.isnan(wins.loc[fake, down])
        assert (out / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        markdown = (out / "results.md").read_text()
        assert (
            f"| {down} | — | — | 0 | 0 | 0 | 0.0000 |  | yes | APIConnectionError" in markdown
            and "## Win rates" in markdown
        )

        again = benchmark(home, *args)  # answers and scores come from the artifact store
        assert again.exit_code == 0, again.output
        assert len(server.requests) == 2 * len(VAL)
        assert pd.read_csv(out / "results.csv").set_index("variant").loc[down, "failed"]

        judged = home / "artifacts" / "benchmark_judge"
        assert len(list(judged.iterdir())) == len(VAL)
        judge.write_text(judge.read_text() + "# edited\n")  # an edited judge scores again, the answers stay cached
        edited = benchmark(home, *args)
        assert edited.exit_code == 0 and len(server.requests) == 2 * len(VAL), edited.output
        assert len(list(judged.iterdir())) == 2 * len(VAL)


def test_the_benchmark_judge_is_told_the_task_and_its_cache_depends_on_it(tmp_path):
    import asyncio

    from autorl.trajectories import Trajectory, TrajectoryGroup
    from pipelines.benchmarking.head_to_head import judge_groups
    from ruler import TrajectoryScore

    told = []

    class Judge:
        async def score_group(self, message_lists, *, rubric, tools, task=None):
            told.append(task)
            return [
                TrajectoryScore(trajectory_id=str(i), explanation="", score=0.5) for i, _ in enumerate(message_lists, 1)
            ]

    def groups() -> list[TrajectoryGroup]:
        answers = [[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": a}] for a in ("4", "5")]
        return [TrajectoryGroup([Trajectory(messages_and_choices=m) for m in answers])]

    store = ArtifactStore(tmp_path)
    for task in ("Arithmetic.", "Arithmetic.", "Spelling."):
        asyncio.run(judge_groups(groups(), Judge(), "tests:Judge", "rubric", store, Counter(), task))
    assert told == ["Arithmetic.", "Spelling."]  # the second run came from the cache; another task is judged anew


def test_an_api_model_variant_calls_the_run_s_tools_for_real(tmp_path):
    """A run whose task has a Python-function tool: an OpenAI-compatible endpoint (`name@URL`) answers with
    a tool call, the tool runs, its result goes back to the endpoint, and the final answer is judged."""
    from tests.helpers.chat_server import ChatCompletionServer

    make_run(tmp_path)
    record = json.loads((tmp_path / "runs" / "r" / "run.json").read_text())
    tools = Path(__file__).resolve().parents[1] / "pipelines" / "tasks" / "unit_tools.py"
    record["task"] = {"description": "Convert units.", "tools": [{"name": "convert", "function": f"{tools}:convert"}]}
    (tmp_path / "runs" / "r" / "run.json").write_text(json.dumps(record))

    def answer(body: dict) -> dict:
        last = body["messages"][-1]
        if last["role"] == "tool":  # the tool's result came back: state it
            message = {"role": "assistant", "content": f"That is {last['content']}."}
        else:
            arguments = json.dumps({"value": 3, "from_unit": "mi", "to_unit": "km"})
            call = {"id": "call-1", "type": "function", "function": {"name": "convert", "arguments": arguments}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}
        return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}

    judge = tmp_path / "judges.py"
    judge.write_text('def says_km(messages):\n    return float("4.82803 km" in messages[-1]["content"])\n')
    server = ChatCompletionServer(answer)
    try:
        api = f"api@{server.base_url}"
        result = benchmark(tmp_path, "--variants", api, "--judge", f"{judge}:says_km", "--out", str(tmp_path / "b"))
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 2 * len(VAL)  # per input: the call, then the answer
    assert all(r["tools"][0]["function"]["name"] == "convert" for r in server.requests)
    results = [r["messages"][-1]["content"] for r in server.requests if r["messages"][-1]["role"] == "tool"]
    assert results == ["3 mi = 4.82803 km"] * len(VAL)
    assert pd.read_csv(tmp_path / "b" / "results.csv").set_index("variant").loc[api, "mean"] == 1.0
