"""The pipeline's SFT warm-up (`autorl run --sft-file`): the stage fine-tunes the LoRA on the tiny model in ART's
steps (chunks of batches, one learning-rate schedule), the train stage starts from its last checkpoint with its
history first (ART's step numbering: RL's first step is the one after the warm-up's), and a bad file is one
line before anything starts. Its cache key: tests/test_pipeline_units.py."""

from __future__ import annotations

import asyncio
import io
import json
from collections import Counter

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from autorl.backends.run_dir import read_history
from autorl.errors import AutoRLError
from autorl.serving.embedded import resolve_base_model
from autorl.task import TaskSpec
from autorl.tracking import Tracker
from autorl.training.checkpoints import complete_checkpoints
from autorl.training.trainer import GRPOTrainer
from autorl.trajectories import Trajectory
from pipelines.artifacts import ArtifactStore
from pipelines.cli import app
from pipelines.config import RunConfig
from pipelines.policy import Policy
from pipelines.records import sft as sft_records
from pipelines.records import train as train_records
from pipelines.records.step_costs import training_cost
from pipelines.stage_context import StageContext
from pipelines.staged_run import stage_keys
from pipelines.stages import report, sft, train
from ruler import FunctionJudge
from tests.helpers.cli import error_line
from tests.helpers.pipeline import TASK as PIPELINE_TASK
from tests.helpers.pipeline import TRAIN, NoisyModelJudge, ScriptedPolicy, upstream_artifacts

TASK = TaskSpec(description="Greet a customer politely")


def conversation(user: str, answer: str) -> str:
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return json.dumps({"messages": messages})


def lora(trainer: GRPOTrainer) -> dict[str, torch.Tensor]:
    return {n.replace(".default", ""): p.detach().clone() for n, p in trainer.model.named_parameters() if "lora" in n}


def test_the_warm_up_trains_in_art_s_steps_and_rl_starts_from_its_last_checkpoint(tiny_model, tmp_path):
    file = tmp_path / "warm_up.jsonl"
    lines = [conversation(f"hello {i}", "Good day, how may I help you?") for i in range(5)]
    file.write_text("\n".join(lines) + "\n\n")  # a blank line is skipped
    config = RunConfig(
        model=str(tiny_model), home=tmp_path / "home", steps=2, wandb=False, trainer={"dtype": "float32"},
        sft={"file": file, "batch_size": 2, "chunk_size": 1},
    )  # fmt: skip
    keys = stage_keys(TASK, config)
    store = ArtifactStore(config.home / "artifacts")
    policy = Policy(config, store.root, keys["train"], Counter(), TASK, tmp_path / "logs")
    printed = io.StringIO()
    tracker = Tracker([], tmp_path, "run", "id", {})
    ctx = StageContext(TASK, config, store, keys, policy, None, tracker, tmp_path / "run", Console(file=printed))
    try:
        assert not sft.is_done(ctx) and train_records.last_step(ctx) == 2  # before the warm-up: RL's steps alone
        summary = asyncio.run(sft.run(ctx))
        # 5 conversations in batches of 2: 3 batches, a chunk of 1 batch per model step
        assert {k: summary[k] for k in ("steps", "conversations", "epochs")} == {
            "steps": 3,
            "conversations": 5,
            "epochs": 1,
        }
        assert sft.is_done(ctx) and sft_records.first_rl_step(ctx) == 4 and train_records.last_step(ctx) == 5
        warm_up = read_history(ctx.artifact("sft"))
        assert [(h["step"], h["sft"]) for h in warm_up] == [(1, 1.0), (2, 1.0), (3, 1.0)]
        assert [h["learning_rate"] for h in warm_up] == pytest.approx([2e-4, 1e-4, 0.0])  # linear from the peak
        assert summary["final_loss"] == warm_up[-1]["loss"] and "sft step 3/3" in printed.getvalue()

        # killed after step 3's checkpoint, before its history line and the manifest: the rerun trains nothing
        # again, and takes step 3's line from its checkpoint
        (ctx.artifact("sft") / "artifact.json").unlink()
        (ctx.artifact("sft") / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in warm_up[:2]))
        printed.truncate(0)
        assert asyncio.run(sft.run(ctx))["steps"] == 3 and "sft step" not in printed.getvalue()
        assert read_history(ctx.artifact("sft")) == warm_up

        train.start_from_sft(ctx)
        work = policy.run_dir
        assert [step for step, _ in complete_checkpoints(work / "checkpoints")] == [3]
        assert read_history(work) == warm_up and train_records.steps_done(ctx) == 3
        assert train_records.history_frame(ctx).empty and train_records.best_step(ctx) is None  # no RL step yet
        assert training_cost(ctx, 3) == (0, sum(h["seconds"] for h in step_costs(ctx)))
        train.start_from_sft(ctx)  # the training directory has its checkpoint: nothing is written again
        assert read_history(work) == warm_up

        base = resolve_base_model(config.model)
        rl = lora(GRPOTrainer(base, work / "checkpoints", config.trainer))  # as the policy's trainer resumes
        warmed = lora(GRPOTrainer(base, ctx.artifact("sft") / "checkpoints", config.trainer))
        assert rl.keys() == warmed.keys() and all(torch.equal(rl[n], warmed[n]) for n in rl)
        assert any(not torch.equal(t, torch.zeros_like(t)) for n, t in rl.items() if "lora_B" in n)  # trained
    finally:
        policy.backend.close()


def step_costs(ctx: StageContext) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(ctx.artifact("sft").glob("steps/*/cost.json"))]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "does not exist"),
        ("not json\n", "warm_up.jsonl:1: "),
        ('{"prompt": "hi"}\n', 'expected an object with "messages"'),
        ("\n\n", "has no conversations"),
        (conversation("hi", "Hello.") + "\n" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n",
         "conversation 2 has no assistant turn"),
    ],
)  # fmt: skip
def test_a_bad_sft_file_is_one_line_before_anything_starts(tmp_path, content, expected):
    file = tmp_path / "warm_up.jsonl"
    if content is not None:
        file.write_text(content)
    home = tmp_path / "home"
    result = CliRunner().invoke(app, ["run", "Greet a customer", "--sft-file", str(file), "--home", str(home)])
    assert expected in error_line(result)
    assert not (home / "runs").exists() and not (home / "artifacts").exists()


def test_the_stage_is_skipped_only_where_no_warm_up_can_be_given_or_planned():
    assert sft.skipped(RunConfig()) is None  # the plan decides
    assert sft.skipped(RunConfig(sft={"file": "x.jsonl"})) is None
    assert sft.skipped(RunConfig(sft={"bootstrap": 0})) == "--sft-bootstrap 0"
    assert "nothing measured" in sft.skipped(RunConfig(preflight="off"))


def test_a_warm_up_given_with_a_backend_is_one_line_and_none_given_is_no_refusal():
    server = "http://127.0.0.1:7999"
    sft.check_file(RunConfig(backend=server))  # the plan's warm-up the stage leaves to the server (none)
    for given, flag in (({"file": "x.jsonl"}, "--sft-file"), ({"bootstrap": 8}, "--sft-bootstrap")):
        with pytest.raises(AutoRLError, match=f"{flag} with --backend: not supported"):
            sft.check_file(RunConfig(backend=server, sft=given))


class AnswersSomeRight(ScriptedPolicy):
    """The base policy to a bootstrap warm-up: its first answer to an even-numbered training question is "Paris",
    every other answer a sentence without it."""

    def __init__(self, run_dir):
        super().__init__(run_dir, ["unused"])
        self.counts: Counter[str] = Counter()

    async def answer(self, prompt, text, config, name=None):
        self.answered.append((text, name))
        self.counts[text] += 1
        right = self.counts[text] == 1 and text.startswith("train") and int(text.split()[-1].rstrip("?")) % 2 == 0
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
        reply = "Paris" if right else "It is a city."
        return Trajectory(messages_and_choices=[*messages, {"role": "assistant", "content": reply}])


def says_paris(messages: list[dict]) -> float:
    return 1.0 if messages[-1]["content"] == "Paris" else 0.0


def bootstrap_run(tiny_model, tmp_path, judge, **sft_settings):
    config = RunConfig(
        model=str(tiny_model), home=tmp_path / "home", group_size=2, wandb=False, trainer={"dtype": "float32"},
        sft={"bootstrap": 8, "batch_size": 2, "chunk_size": 2, **sft_settings},
    )  # fmt: skip
    keys, store = upstream_artifacts(tmp_path, config)
    policy = AnswersSomeRight(tmp_path / "train")
    printed = io.StringIO()
    tracker = Tracker([], tmp_path, "run", "id", {})
    console = Console(file=printed, width=400)
    ctx = StageContext(PIPELINE_TASK, config, store, keys, policy, judge, tracker, tmp_path, console)
    return ctx, asyncio.run(sft.run(ctx)), printed


def test_the_bootstrap_warm_up_fine_tunes_on_the_policy_s_best_answers_to_training_inputs(tiny_model, tmp_path):
    ctx, summary, printed = bootstrap_run(tiny_model, tmp_path, FunctionJudge(says_paris))
    # 8 groups of 2 answers to the 6 training inputs (two of them twice); the first answers to questions 0, 2
    # and 4 were right: 3 conversations, 2 batches of 2 in one step of 2 batches
    assert summary["bootstrap"] == {"answered": 16, "groups": 8, "kept": 3}
    assert {k: summary[k] for k in ("steps", "conversations", "file")} == {
        "steps": 1, "conversations": 3, "file": sft.SAMPLES_FILE
    }  # fmt: skip
    assert {text for text, _ in ctx.policy.answered} == set(TRAIN)  # never a held-out input
    kept = [json.loads(line) for line in (ctx.artifact("sft") / sft.SAMPLES_FILE).read_text().splitlines()]
    assert [k["messages"] for k in kept] == [
        [{"role": "system", "content": PIPELINE_TASK.system_prompt}, {"role": "user", "content": f"train question {i}?"},
         {"role": "assistant", "content": "Paris"}]
        for i in (0, 2, 4)
    ]  # fmt: skip
    assert "warm-up: kept 3 of 8 groups' best answers (scored at least 0.5)" in printed.getvalue()
    assert sft_records.first_rl_step(ctx) == 2 and [h["step"] for h in read_history(ctx.artifact("sft"))] == [1]
    assert report.sft_section(ctx)[0].startswith(
        "Warmed up with SFT before RL: the policy's own best answers (3 of 8 groups of training inputs had one "
        "scoring at least 0.5), 1 epoch(s), in 1 model steps (1-1, final loss"
    )

    (ctx.artifact("sft") / "artifact.json").unlink()  # killed before its manifest: nothing is asked again
    answered = len(ctx.policy.answered)
    assert asyncio.run(sft.run(ctx))["bootstrap"]["kept"] == 3 and len(ctx.policy.answered) == answered


@pytest.mark.parametrize(
    ("judge", "why"),
    [
        (FunctionJudge(lambda messages: says_paris(messages) / 2), "(scored at least 0.75)"),
        (NoisyModelJudge(), "(the judge is not reliable on these answers"),
    ],
)
def test_no_answer_good_enough_or_a_judge_found_unreliable_is_no_warm_up(tiny_model, tmp_path, judge, why):
    ctx, summary, printed = bootstrap_run(tiny_model, tmp_path, judge, min_reward=0.75)
    assert summary["steps"] == 0 and summary["conversations"] == 0 and sft_records.first_rl_step(ctx) == 1
    assert f"warm-up: kept 0 of 8 groups' best answers {why}" in printed.getvalue()
    assert not (ctx.artifact("sft") / "checkpoints" / "0001").exists()
    assert report.sft_section(ctx)[0].startswith("No warm-up from the policy's own answers: ")
