"""A task's upstream artifacts written as the pipeline writes them, a scripted policy at the edge (it answers from a
list instead of a vLLM server) and a judge that scores at random: what the stage tests (preflight, the sentinel,
the system prompt check, the warm-up) share."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from pathlib import Path

from autorl.inputs.files import GeneratedInput, write_inputs_jsonl
from autorl.task import TaskSpec
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.artifacts import ArtifactStore
from pipelines.config import RunConfig
from pipelines.records import baseline, evaluation, inputs, system_prompt
from pipelines.staged_run import stage_keys
from ruler import TrajectoryScore

TASK = TaskSpec(description="Answer with one word", system_prompt="One word only.")
TRAIN = [f"train question {i}?" for i in range(6)]
VAL = [f"validation question {i}?" for i in range(3)]


class ScriptedPolicy:
    """Answers every input from a cycle of texts, and records what it was asked to serve and answer."""

    def __init__(self, run_dir: Path, texts: list[str]):
        self.run_dir = run_dir
        self._texts = itertools.cycle(texts)
        self.served: list[int] = []
        self.answered: list[tuple[str, str | None]] = []
        self.shares_cpu = False
        """What `beside_embedded_on_cpu` says (a scripted policy runs no server)."""
        self.delays: dict[str, float] = {}
        """Seconds an answer to an input takes (default none)."""

    def beside_embedded_on_cpu(self) -> bool:
        return self.shares_cpu

    async def start(self) -> None:
        pass

    async def serve_step(self, step: int) -> str:
        self.served.append(step)
        return f"step-{step}"

    async def answer(self, prompt: str, text: str, config: RunConfig, name: str | None = None) -> Trajectory:
        await asyncio.sleep(self.delays.get(text, 0))
        self.answered.append((text, name))
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
        return Trajectory(
            messages_and_choices=[*messages, {"role": "assistant", "content": next(self._texts)}],
            metadata={"input": text},
        )


class NoisyModelJudge:
    """A judge that reads rubrics, as a model does, and scores at random: its audit is not reliable."""

    reads_rubric = True

    def __init__(self):
        self.random = random.Random(0)

    async def score_group(self, message_lists, *, rubric, tools=None, task=None):
        return [
            TrajectoryScore(trajectory_id=str(i + 1), explanation="?", score=self.random.random())
            for i in range(len(message_lists))
        ]


def upstream_artifacts(
    tmp_path: Path, config: RunConfig, task: TaskSpec = TASK, with_prompt: bool = True
) -> tuple[dict[str, str], ArtifactStore]:
    """The stage keys of a run of `task` under `config`, and a store holding its inputs (TRAIN, VAL) and, with
    `with_prompt`, its system prompt (TASK's) and baseline (two judged base answers to each VAL input) artifacts."""
    keys = stage_keys(task, config)
    store = ArtifactStore(tmp_path / "artifacts")
    rows = [GeneratedInput(input=t, split="train") for t in TRAIN] + [GeneratedInput(input=t, split="val") for t in VAL]
    with store.write(inputs.NAME, keys[inputs.NAME], {}) as out:
        write_inputs_jsonl(rows, out / inputs.FILE)
    if not with_prompt:
        return keys, store
    with store.write(system_prompt.NAME, keys[system_prompt.NAME], {}) as out:
        (out / system_prompt.FILE).write_text(json.dumps({"system_prompt": TASK.system_prompt, "fallback": None}))
    groups = [
        TrajectoryGroup(
            Trajectory(
                messages_and_choices=[{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
                reward=len(answer) / 10,
                metadata={"input": text, "variant": baseline.VARIANT},
            )
            for answer in ("one", "two words")
        )
        for text in VAL
    ]
    with store.write(baseline.NAME, keys[baseline.NAME], {}) as out:
        evaluation.save(out, groups)
    return keys, store
