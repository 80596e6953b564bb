"""Finished runs as the pipeline records them, and `autorl benchmark` run on them: what the benchmark tests share."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from autorl.serving.config import ServerConfig
from pipelines.artifacts import ArtifactStore
from pipelines.cli import app
from pipelines.config import RunConfig

VAL = ["What is 6 x 7?", "What is 2 + 2?", "Name a prime number."]
PROMPT = "Answer with the number only."


def make_run(
    home: Path,
    name: str = "r",
    rewards: tuple[float, ...] = (0.6, 0.4),
    train: tuple[str, ...] = ("Train me.",),
    model: str | None = None,
    server: ServerConfig | None = None,
) -> None:
    """A finished run as the pipeline records it: run.json with stage keys, the inputs (`train`, then `VAL`)
    and system prompt artifacts, and one checkpoint (LoRA file + metrics) and history line per training reward;
    its base model is `model` (default: the embedded one), its server settings `server` (default: the defaults)."""
    keys = {"inputs": f"inputs-{name}", "system_prompt": f"prompt-{name}", "train": f"train-{name}"}
    store = ArtifactStore(home / "artifacts")
    with store.write("inputs", keys["inputs"], {}) as out:
        rows = [*((text, "train") for text in train), *((text, "val") for text in VAL)]
        (out / "inputs.jsonl").write_text(
            "".join(
                json.dumps(
                    {"input": t, "split": s, "difficulty": "easy", "generator": "g", "prompt_hash": "0", "attempt": 1}
                )
                + "\n"
                for t, s in rows
            )
        )
    with store.write("system_prompt", keys["system_prompt"], {}) as out:
        (out / "system_prompt.json").write_text(json.dumps({"system_prompt": PROMPT}))
    train_dir = store.path("train", keys["train"])
    for step, reward in enumerate(rewards, start=1):
        checkpoint = train_dir / "checkpoints" / f"{step:04d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "adapter_model.safetensors").write_bytes(f"lora weights of step {step}".encode())
        (checkpoint / "metrics.json").write_text(json.dumps({"step": step, "reward": reward}))
        with open(train_dir / "history.jsonl", "a") as history:
            history.write(json.dumps({"step": step, "reward": reward}) + "\n")
    run_dir = home / "runs" / name
    run_dir.mkdir(parents=True)
    config = RunConfig(
        steps=max(len(rewards), 1),
        name=name,
        wandb=False,
        server=server or ServerConfig(),
        **({"model": model} if model else {}),
    )
    record = {
        "name": name,
        "task": {"description": "Arithmetic.", "rubric": ""},
        "config": config.model_dump(mode="json"),
        "keys": keys,
    }
    (run_dir / "run.json").write_text(json.dumps(record))


def benchmark(home: Path, *args: str):
    return CliRunner().invoke(app, ["benchmark", "r", "--home", str(home), *args])
