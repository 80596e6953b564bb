"""`autorl run`: from a task description to a trained LoRA, on the embedded model by default.

Per step: take the next inputs of the training split, sample `group_size` answers to each through
the policy's OpenAI-compatible client, score each group with the judge (RULER by default), and apply
one GRPO update; the backend checkpoints the LoRA and serves it for the next step. A rerun of the
same run name resumes after its newest checkpoint and trains until `steps` steps exist.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path

from pydantic import BaseModel, Field
from rich.console import Console

from autorl import LocalBackend, TrainableModel, TrainConfig, gather_trajectory_groups
from autorl.embedded import DEFAULT_BASE_MODEL
from autorl.errors import AutoRLError
from autorl.inputs import GenerationConfig, generate_inputs, read_inputs_jsonl, write_inputs_jsonl
from autorl.rollout import RolloutConfig, single_turn_rollout
from autorl.task import TaskSpec
from autorl.trajectories import TrajectoryGroup
from autorl.vllm_server import ServerConfig
from ruler import DEFAULT_RUBRIC, ruler_score_group
from ruler.loading import load_judge

console = Console(stderr=True)
RUNS_PROJECT = "runs"


class RunConfig(BaseModel):
    """Everything `autorl run` needs; CLI flags map onto these fields one to one."""

    model: str = DEFAULT_BASE_MODEL
    """Base model of the policy: `embedded:<name>` or a local Hugging Face directory."""
    judge: str = "embedded"
    """Judge: a model for RULER (`embedded`, a LiteLLM string, `name@http://host:port/v1`) or `module:attribute`."""
    generator: str = "embedded"
    """Model that writes the inputs and the system prompt (same forms as a judge model)."""
    steps: int = Field(10, ge=1)
    """Total training steps of the run (a resumed run trains until this many exist)."""
    group_size: int = Field(4, ge=2)
    """Rollouts per input; GRPO compares them, so at least 2."""
    groups_per_step: int = Field(2, ge=1)
    """Inputs (groups) per training step."""
    num_inputs: int | None = Field(None, ge=1)
    """Inputs to generate, train and validation together; None uses the task's `num_inputs`."""
    learning_rate: float = Field(TrainConfig().learning_rate, gt=0)
    """AdamW learning rate of the LoRA."""
    seed: int = 0
    """Seed of input generation and of the train/validation split."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Policy sampling settings."""
    home: Path = Path(".autorl")
    """Where runs live; the run directory is `<home>/runs/<name>`."""
    name: str | None = None
    """Run name; None derives one from the task text and the model."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    """How the local vLLM server is started."""


def default_run_name(task: TaskSpec, model: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", task.description.lower()).strip("-")[:40].rstrip("-")
    digest = hashlib.sha256(f"{task.description}\n{model}".encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


async def run(task: TaskSpec, config: RunConfig) -> Path:
    """Train the policy on `task`; returns the run directory."""
    name = config.name or default_run_name(task, config.model)
    judge = load_judge(config.judge)  # a bad judge spec fails before any server starts
    backend = LocalBackend(config.home, server=config.server)
    model = TrainableModel(name=name, project=RUNS_PROJECT, base_model=config.model)
    run_dir = backend.run_dir(model)
    console.print(f"run [bold]{name}[/bold] in {run_dir}")
    try:
        await model.register(backend)
        system_prompt, train_inputs = await asyncio.to_thread(_inputs, task, config, run_dir)
        client = model.openai_client()
        rubric = task.rubric or DEFAULT_RUBRIC
        step = await model.get_step()
        if step >= config.steps:
            console.print(f"run already has {step} steps (asked for {config.steps}); nothing to train")
        while step < config.steps:
            batch = [
                train_inputs[(step * config.groups_per_step + i) % len(train_inputs)]
                for i in range(config.groups_per_step)
            ]
            groups = [
                TrajectoryGroup(
                    single_turn_rollout(
                        client, model.get_inference_name(), system_prompt, text, config.rollout, {"input": text}
                    )
                    for _ in range(config.group_size)
                )
                for text in batch
            ]

            async def score(group: TrajectoryGroup) -> TrajectoryGroup | None:
                return await ruler_score_group(group, judge, rubric, swallow_exceptions=True)

            scored = await gather_trajectory_groups(
                groups, pbar_desc=f"step {step + 1} rollouts+judge", max_exceptions=0.25, after_each=score
            )
            metrics = await model.train(scored, config=TrainConfig(learning_rate=config.learning_rate))
            step = metrics["step"]
            console.print(
                f"step {step}/{config.steps}  reward {metrics['reward']:.3f} ± {metrics['reward_std']:.3f}  "
                f"loss {metrics['loss']:+.4f}  groups trained {metrics['groups_trained']}/{metrics['groups']}  "
                f"{metrics['step_time_s']:.1f}s"
            )
    finally:
        backend.close()
    console.print(f"done: {run_dir / 'checkpoints'} ({step} checkpoints), history in {run_dir / 'history.jsonl'}")
    return run_dir


def _inputs(task: TaskSpec, config: RunConfig, run_dir: Path) -> tuple[str, list[str]]:
    """The system prompt and training inputs of the run, generated once and reused on resume."""
    inputs_path, prompt_path = run_dir / "inputs.jsonl", run_dir / "system_prompt.json"
    if inputs_path.exists() and prompt_path.exists():
        rows = read_inputs_jsonl(inputs_path)
        system_prompt = json.loads(prompt_path.read_text())["system_prompt"]
    else:
        generated = generate_inputs(task, config.num_inputs, config.generator, config.seed, GenerationConfig())
        rows, system_prompt = generated.inputs, generated.system_prompt
        write_inputs_jsonl(rows, inputs_path)
        prompt_path.write_text(json.dumps({"system_prompt": system_prompt}))
    train = [row.input for row in rows if row.split == "train"]
    if not train:
        raise AutoRLError("no training inputs: ask for more inputs (--inputs)")
    return system_prompt, train
