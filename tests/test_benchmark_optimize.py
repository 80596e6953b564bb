"""`autorl benchmark`'s `+optimized` variants: DSPy's optimizers tune a variant's prompt on the run's train
inputs with the run's judge as the metric, against scripted OpenAI-compatible endpoints on 127.0.0.1 (the
variant's model, a RULER judge, GEPA's reflection model) and program judges; the tuned prompt answers the
held-out inputs, is cached, and shows in the results with its cost; and the user's mistakes are one line."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.benchmark_runs import VAL, benchmark, make_run
from tests.helpers.chat_server import ChatCompletionServer, completion
from tests.helpers.cli import error_line

EASY = tuple(f"Easy one {n}: what is 6 x 7?" for n in range(4))
HARD = tuple(f"Hard one {n}: what is 6 x 7?" for n in range(4))
TRAIN = EASY + HARD
IS_42 = (
    "def is_42(messages):\n"
    '    answers = [m for m in messages if m["role"] == "assistant"]\n'
    '    return float(len(answers) == 1 and answers[0]["content"].strip() == "42")\n'
)
"""Right when the conversation it is given holds one answer, "42": a demonstration shown before the input is no
part of the answer the judge scores."""


def demonstrated(body: dict) -> bool:
    """Whether a request shows earlier turns (demonstrations) before its input."""
    return any(m["role"] == "assistant" for m in body["messages"])


def learns_from_demonstrations(body: dict) -> dict:
    """A model that answers the easy inputs right, and every input right once it is shown a demonstration."""
    right = demonstrated(body) or body["messages"][-1]["content"].startswith("Easy")
    return completion(body, "42" if right else "I am not sure.")


@pytest.fixture
def home(tmp_path) -> Path:
    make_run(tmp_path, train=TRAIN)
    (tmp_path / "judges.py").write_text(IS_42)
    return tmp_path


def requests_for(server: ChatCompletionServer, texts: tuple[str, ...] | list[str]) -> list[dict]:
    return [r for r in server.requests if r["messages"][-1]["content"] in texts]


def test_bootstrap_tunes_the_prompt_the_held_out_answers_use_it_and_a_rerun_reuses_it(home):
    """bootstrap: the model's right answers to easy train inputs become demonstrations; with them it answers
    the held-out inputs (which it gets wrong alone) right. A rerun asks no model."""
    out = home / "bench"
    server = ChatCompletionServer(learns_from_demonstrations)
    try:
        fake = f"fake@{server.base_url}"
        args = ["--variants", f"{fake},{fake}+optimized", "--judge", f"{home / 'judges.py'}:is_42", "--out", str(out)]
        first = benchmark(home, *args, "--optimizer-budget", "40")
        assert first.exit_code == 0, first.output
        held_out = requests_for(server, VAL)
        tuning = len(server.requests) - len(held_out)
        assert all(r["messages"][-1]["content"] in TRAIN for r in server.requests if r not in held_out)
        assert 0 < tuning <= 40  # within --optimizer-budget
        assert sorted(demonstrated(r) for r in held_out) == [False] * len(VAL) + [True] * len(VAL)
        shown = next(r for r in held_out if demonstrated(r))["messages"]
        assert shown[0]["role"] == "system" and shown[-1]["role"] == "user"
        assert all(m["content"].startswith("Easy") for m in shown[1:-1] if m["role"] == "user")  # right answers only

        results = pd.read_csv(out / "results.csv").set_index("variant")
        assert results.loc[fake, "mean"] == 0.0 and results.loc[f"{fake}+optimized", "mean"] == 1.0
        assert results.loc[fake, "cost_calls"] == 0 and results.loc[fake, "cost_s"] == 0
        assert results.loc[f"{fake}+optimized", "cost_calls"] == tuning  # a program judge makes no model call
        assert results.loc[f"{fake}+optimized", "made_by"] == "bootstrap (tuned)"
        markdown = (out / "results.md").read_text()
        assert "## Optimized prompts" in markdown and "bootstrap kept" in markdown and "Demonstration 1" in markdown
        artifacts = list((home / "artifacts" / "benchmark_prompt").glob("*/prompt.json"))
        assert len(artifacts) == 1 and f"`{artifacts[0]}`" in markdown
        tuned = json.loads(artifacts[0].read_text())
        assert tuned["improved"] and tuned["score"] == 1.0 > tuned["original_score"]
        assert tuned["calls"] == {"policy": tuning}

        again = benchmark(home, *args, "--optimizer-budget", "40")
        assert again.exit_code == 0, again.output
        assert len(server.requests) == tuning + len(held_out)  # the prompt and the answers came from the cache
        assert pd.read_csv(out / "results.csv").set_index("variant").equals(results)

        other = benchmark(home, *args, "--optimizer-budget", "41")  # another budget tunes anew
        assert other.exit_code == 0, other.output
        assert len(list((home / "artifacts" / "benchmark_prompt").glob("*/prompt.json"))) == 2
    finally:
        server.close()


def tune_alone(home: Path, answer) -> tuple[ChatCompletionServer, object, Path]:
    """`autorl benchmark` of one +optimized variant whose model answers with `answer`, judged by `is_42`
    (budget 40); the server (closed, its requests kept), the command's result and the output directory."""
    out = home / "bench"
    server = ChatCompletionServer(answer)
    try:
        variant = f"fake@{server.base_url}+optimized"
        args = ["--variants", variant, "--judge", f"{home / 'judges.py'}:is_42", "--out", str(out)]
        result = benchmark(home, *args, "--optimizer-budget", "40")
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    return server, result, out


def test_an_optimizer_that_finds_nothing_better_keeps_the_original_prompt_and_says_so(home):
    """A model that demonstrations do not help: every candidate ties the original, which is kept."""

    def ignores_demonstrations(body: dict) -> dict:
        return completion(body, "42" if body["messages"][-1]["content"].startswith("Easy") else "No idea.")

    server, result, out = tune_alone(home, ignores_demonstrations)
    assert "found no prompt better than the original" in result.output
    assert any(demonstrated(r) for r in requests_for(server, TRAIN))  # candidates with demonstrations were tried
    assert not any(demonstrated(r) for r in requests_for(server, VAL))  # the held-out inputs get the original
    assert {r["messages"][0]["content"] for r in requests_for(server, VAL)} == {"Answer with the number only."}
    assert "found no prompt better than the original" in (out / "results.md").read_text()
    assert pd.read_csv(out / "results.csv").loc[0, "made_by"] == "bootstrap (kept the original)"


def test_bootstrap_tries_a_pool_input_again_when_its_first_answer_is_no_demonstration(home):
    """A model whose good answers are rare (right on every second try of an input): one try per pool input finds
    no demonstration; the tries the budget leaves room for find some, and they help."""
    tries: dict[str, int] = {}

    def right_on_second_tries(body: dict) -> dict:
        text = body["messages"][-1]["content"]
        tries[text] = tries.get(text, 0) + 1
        return completion(body, "42" if demonstrated(body) or tries[text] % 2 == 0 else "I am not sure.")

    server, _, out = tune_alone(home, right_on_second_tries)
    assert all(demonstrated(r) for r in requests_for(server, VAL))
    assert pd.read_csv(out / "results.csv").loc[0, "mean"] == 1.0
    assert max(tries[t] for t in TRAIN) >= 2  # a pool input was asked again
    assert "up to 3 tries per pool input" in (out / "results.md").read_text()


def test_gepa_rewrites_the_instructions_with_the_reflection_model(home):
    """gepa: the reflection model reads the judged answers and proposes instructions; the model answers right
    under them, so they are kept and answer the held-out inputs. Reflection calls count in the cost."""
    better = "Always answer with the number 42."

    def follows_instructions(body: dict) -> dict:
        return completion(body, "42" if body["messages"][0]["content"] == better else "I am not sure.", (7, 2))

    def reflects(body: dict) -> dict:
        return completion(body, json.dumps({"new_instruction": better}), (50, 5))

    out = home / "bench"
    model, reflection = ChatCompletionServer(follows_instructions), ChatCompletionServer(reflects)
    try:
        variant = f"fake@{model.base_url}+optimized"
        args = ["--variants", variant, "--judge", f"{home / 'judges.py'}:is_42", "--out", str(out)]
        result = benchmark(
            home, *args, "--reflection-model", f"reflect@{reflection.base_url}", "--price-per-hour", "3600"
        )
    finally:
        model.close()
        reflection.close()
    assert result.exit_code == 0, result.output
    assert reflection.requests and "Answer with the number only." in json.dumps(reflection.requests[0])
    assert {r["messages"][0]["content"] for r in requests_for(model, VAL)} == {better}
    results = pd.read_csv(out / "results.csv").set_index("variant")
    assert results.loc[variant, "mean"] == 1.0 and results.loc[variant, "made_by"] == "gepa (tuned)"
    tuned = json.loads(next((home / "artifacts" / "benchmark_prompt").glob("*/prompt.json")).read_text())
    assert tuned["system_prompt"] == better and tuned["demos"] == []
    assert tuned["calls"]["reflection"] == len(reflection.requests)
    assert results.loc[variant, "cost_calls"] == len(reflection.requests) + len(requests_for(model, TRAIN))
    assert results.loc[variant, "cost_calls"] <= 100  # the default --optimizer-budget

    # priced: every answer's and reflection's tokens as the servers reported them, the seconds at $1 a second
    tuning, reflections = len(requests_for(model, TRAIN)), len(reflection.requests)
    spent = tuned["spent"]
    assert spent["tokens"]["answers"] == {"prompt": 7 * tuning, "completion": 2 * tuning}
    assert spent["tokens"]["reflection"] == {"prompt": 50 * reflections, "completion": 5 * reflections}
    assert spent["usd"]["compute"] == pytest.approx(tuned["seconds"], abs=0.01) and spent["usd"]["api"] == 0
    assert spent["unpriced"] == ["fake@server", "reflect@server"]  # a user's server: no API price, no address
    assert results.loc[variant, "cost_usd"] == pytest.approx(spent["usd"]["total"])
    benchmark_spent = json.loads((out / "cost.json").read_text())  # the tuning's and the held-out answers
    assert benchmark_spent["tokens"]["answers"]["prompt"] == 7 * len(model.requests)
    assert benchmark_spent["tokens"]["reflection"] == spent["tokens"]["reflection"]
    assert "## What this benchmark spent" in (out / "results.md").read_text()


def test_a_ruler_judge_scores_each_answer_beside_a_reference_answer_of_the_original_prompt(home):
    """RULER ranks a group's answers relative to each other: the metric judges each candidate's answer in a
    pair with one answer of the original prompt to the same input, the same reference for every candidate."""
    draws = itertools.count()

    def samples(body: dict) -> dict:  # a sampling model: its answers without demonstrations differ each time
        right = demonstrated(body) or body["messages"][-1]["content"].startswith("Easy")
        return completion(body, "42" if right else f"Maybe {next(draws)}.")

    judged: list[tuple[str, dict[str, str]]] = []

    def ruler(body: dict) -> dict:
        user = body["messages"][-1]["content"]
        trajectories = dict(re.findall(r'<trajectory id="([^"]+)">(.*?)</trajectory>', user, re.S))
        judged.append((user, trajectories))
        scores = {i: {"explanation": "right" if '"42"' in t else "wrong", "score": float('"42"' in t)}
                  for i, t in trajectories.items()}  # fmt: skip
        return completion(body, json.dumps({"scores": scores}))

    out = home / "bench"
    model, judge = ChatCompletionServer(samples), ChatCompletionServer(ruler)
    try:
        fake = f"fake@{model.base_url}"
        args = ["--variants", f"{fake},{fake}+optimized", "--judge", f"judge@{judge.base_url}", "--out", str(out)]
        result = benchmark(home, *args, "--optimizer-budget", "60")
    finally:
        model.close()
        judge.close()
    assert result.exit_code == 0, result.output
    tuning_judged = judged[: len(judged) - len(VAL)]  # then each held-out input's two answers, head to head
    assert tuning_judged and all(len(pair) <= 2 for _, pair in tuning_judged)  # two identical answers are sent once
    scored_often = 0
    for text in HARD:  # every candidate's answer to a selection input was judged beside the same reference answer
        groups = [{a for a in pair.values() if "Maybe" in a} for prompt, pair in tuning_judged if text in prompt]
        if len(groups) > 1:
            assert len(set.intersection(*groups)) == 1
            scored_often += 1
    assert scored_often
    results = pd.read_csv(out / "results.csv").set_index("variant")
    assert results.loc[f"{fake}+optimized", "mean"] > results.loc[fake, "mean"]
    tuned = json.loads(next((home / "artifacts" / "benchmark_prompt").glob("*/prompt.json")).read_text())
    assert tuned["calls"]["judge"] == len(tuning_judged) and sum(tuned["calls"].values()) <= 60


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--variants", "+optimized"],
            "variant '+optimized': +optimized tunes a variant's system prompt, and names none",
        ),
        (
            ["--variants", "base+optimized+optimized"],
            "variant 'base+optimized+optimized': +optimized goes once, at the end",
        ),
        (["--variants", "base+optimized", "--optimizer", "gepa"], "--optimizer gepa needs --reflection-model"),
        (
            [
                "--variants",
                "base+optimized",
                "--reflection-model",
                "m@http://127.0.0.1:9/v1",
                "--optimizer",
                "bootstrap",
            ],
            "--reflection-model is used by --optimizer gepa only",
        ),
        (
            ["--variants", "base+optimized", "--optimizer-budget", "10"],
            "--optimizer-budget 10 is too small for bootstrap on the 8 train inputs of run 'r': it needs at least 32 "
            "model calls (the variant answers the 4 pool inputs, then the original prompt and one candidate answer 4 "
            "inputs, each answer judged by RULER beside a reference answer)",  # the run's judge: embedded RULER
        ),
        (
            [
                "--variants",
                "base+optimized",
                "--optimizer-budget",
                "20",
                "--judge",
                "JUDGE",
                "--reflection-model",
                "m@http://127.0.0.1:9/v1",
            ],
            "--optimizer-budget 20 is too small for gepa on the 8 train inputs of run 'r': it needs at least 24 model "
            "calls (the original prompt answers 4 inputs, then one reflection step)",
        ),
        (
            ["--variants", "base+optimized", "--optimizer-budget", "11", "--judge", "JUDGE"],
            "--optimizer-budget 11 is too small for bootstrap on the 8 train inputs of run 'r': it needs at least 12 "
            "model calls (the variant answers the 4 pool inputs, then the original prompt and one candidate answer 4 "
            "inputs)",
        ),
    ],
)
def test_optimizer_mistakes_end_in_one_line_before_any_model_call(home, args, message):
    args = [f"{home / 'judges.py'}:is_42" if arg == "JUDGE" else arg for arg in args]
    assert message in error_line(benchmark(home, *args))


def test_too_few_train_inputs_to_tune_on_is_one_line(tmp_path):
    make_run(tmp_path)  # one train input
    assert "+optimized needs at least 4 train inputs to tune a prompt on; run 'r' has 1" in error_line(
        benchmark(tmp_path, "--variants", "base,base+optimized")
    )


def test_a_checkpoint_costs_its_training_steps(home):
    """The train stage records each step's seconds and model calls; a checkpoint's cost adds up its steps."""
    from collections import Counter

    from pipelines.benchmarking.variants import RunView, resolve

    steps = home / "artifacts" / "train" / "train-r" / "steps"
    for step, (seconds, calls) in enumerate([(30.5, {"policy": 8, "judge": 2}), (29.0, {"policy": 8})], 1):
        (steps / f"{step:04d}").mkdir(parents=True)
        (steps / f"{step:04d}" / "cost.json").write_text(json.dumps({"seconds": seconds, "model_calls": calls}))
    main = RunView(home, "r", Counter())
    latest, first, base = (resolve(label, main, {"r": main}) for label in ("r@latest", "r@1", "base"))
    assert (latest.cost.calls, latest.cost.seconds, latest.cost.made_by) == (18, 59.5, "2 training steps")
    assert (first.cost.calls, first.cost.seconds) == (10, 30.5) and (base.cost.calls, base.cost.seconds) == (0, 0)
    (steps / "0001" / "cost.json").unlink()  # a run trained before steps were costed: unknown, not 0
    assert resolve("r@latest", main, {"r": main}).cost.calls is None
