"""The configuration of a pipeline run; `autorl run` flags map onto these fields one to one."""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autorl.agents.rollout import RolloutConfig
from autorl.backends.cluster.config import ClusterConfig
from autorl.backends.retention import KeepPolicy
from autorl.config import TrainConfig, TrainerConfig
from autorl.errors import AutoRLError
from autorl.home import DEFAULT_HOME
from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL
from autorl.task import TaskSpec, describe_error
from autorl.tracking import PACKAGES

from .sentinel import SentinelConfig

STAGES = ("inputs", "system_prompt", "baseline", "preflight", "plan", "sft", "train", "evaluate", "report")
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
"""A run name: a directory name under `runs/`, never a path (no '/', no leading '.' or '-': not a flag)."""


MAX_STEPS = 1_000_000
"""The most RL steps a run may ask for: a number past it is a typo, not a run."""


def check_run_name(name: str) -> str:
    """`name`, if it is a run name (`RUN_NAME`); else one `AutoRLError` line. Every command that takes a run name
    checks it, so none reads or writes outside the home's `runs/`."""
    if not RUN_NAME.fullmatch(name):
        raise AutoRLError(
            f"{name!r} is not a run name: use letters, digits, '.', '_' and '-' (no '/' or '@', no leading '.' or '-')"
        )
    return name


class SFTConfig(BaseModel):
    """A supervised warm-up of the policy's LoRA before RL, on a file (`--sft-file`) or on the policy's own best
    answers (`--sft-bootstrap`), cut into model steps as ART's `create_sft_dataset_iterator` cuts it for
    `model.train_sft`: each step a chunk of `chunk_size` batches."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    file: Path | None = None
    """JSONL file of conversations to fine-tune on before RL (ART's format: a `{"messages": [...], "tools": [...]}`
    object a line; every assistant turn is trained); its steps come first, RL continues from its checkpoint.
    Unset: no warm-up."""
    epochs: int = Field(1, ge=1)
    """Passes over the SFT file."""
    batch_size: int = Field(2, ge=1)
    """Conversations per optimizer step of the warm-up."""
    peak_lr: float = Field(2e-4, gt=0)
    """The warm-up's peak learning rate: reached after a linear warm-up over a tenth of its batches, then down
    to 0 along a line (ART's defaults)."""
    chunk_size: int = Field(10, ge=1)
    """Batches per model step of the warm-up (each step is a checkpoint and a history line, as one
    `model.train_sft` call is)."""
    bootstrap: int = Field(0, ge=0, le=10_000)
    """A warm-up from the policy's own best answers instead of a file (rejection sampling: zero data): this many
    training inputs, `group_size` answers each under the run's system prompt, judged; each group's best answer
    that scores at least `min_reward` is a conversation to fine-tune on. A model judge must pass its audit on
    these groups, else there is no warm-up. 0: off."""
    min_reward: float = Field(0.5, ge=0, le=1)
    """The score a sampled answer needs to be kept for the `bootstrap` warm-up."""

    @model_validator(mode="after")
    def _one_source(self) -> SFTConfig:
        if self.file is not None and self.bootstrap:
            raise ValueError("give --sft-file or --sft-bootstrap, not both: one warm-up at a time")
        return self


class RunConfig(BaseModel):
    """Everything a run needs besides the task."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: str = DEFAULT_BASE_MODEL
    """Base model of the policy: `embedded:<name>` or a local Hugging Face directory."""
    judge: str = "embedded"
    """Judge: a model for RULER (`embedded`, a LiteLLM string, `name@http://host:port/v1`) or `module:attribute`."""
    judge_explanations: Literal["report", "always"] = "report"
    """Where a RULER judge writes a short explanation beside each score. report: only where the report shows them
    (the evaluate stage's judging); elsewhere (baseline, preflight, the system prompt check, training) it gives
    the scores alone, a few tokens an answer instead of dozens. always: in every judging, as ART's RULER does
    (more judge tokens and time)."""
    generator: str = "embedded"
    """Model that writes the inputs and the system prompt (same forms as a judge model)."""
    steps: int = Field(20, ge=1, le=MAX_STEPS)
    """RL training steps of the run, after the SFT warm-up's if any (a resumed run trains until this many exist).
    ART counts a warm-up's steps as model steps: with `--sft-file`, RL's first step is the one after them. Not
    given, it is a cap: training stops earlier once validation stops improving (`patience`)."""
    group_size: int = Field(8, ge=2)
    """Rollouts per input; GRPO compares them, so at least 2. With 8, fewer groups tie (no signal) than with 4."""
    groups_per_step: int = Field(2, ge=1)
    """Inputs (groups) per training step."""
    dynamic_sampling: int = Field(4, ge=1)
    """Most groups a training step may draw, as a multiple of `groups_per_step`: while fewer than
    `groups_per_step` of its groups differ in score beyond the judge's noise, it draws more training inputs
    (`pipelines.sampling`), where the judge is a program or its audit found it reliable. Inputs that tie twice
    in a row are set aside for a few steps. 1: a step draws `groups_per_step` inputs, tied or not."""
    tie_search: int = Field(3, ge=0)
    """Rounds of `group_size` more answers a training step may give an input whose group tied below the top score,
    each round judged with the earlier answers, before it draws other inputs; from the same budget as
    `dynamic_sampling` (`pipelines.sampling`). A searched group that now differs trains on `group_size` of its
    answers, balanced between those above its mean and the rest, so a rare full-credit answer among half-credit
    ones is trained on (Reinforce-Ada). 0: a tied group draws new inputs only (DAPO's dynamic sampling)."""
    validate_every: int = Field(5, ge=0)
    """Every this many RL steps (and at the last), the newest checkpoint answers `validation_inputs` held-out
    inputs, judged beside the base model's answers to them, and its mean is logged as `val/reward`: the best
    checkpoint (`@best`, evaluated beside the latest, kept by `keep_checkpoints`' "best") is the validated one
    with the highest. Only where the judge is a program or its audit found it reliable, and the run has more
    steps than this. 0: no validation during training; the best is then the step with the highest training
    reward."""
    patience: int = Field(2, ge=0)
    """Validations in a row without a new best after which training stops before `steps` (the held-out curve has
    flattened; `@best` is the best validated checkpoint). Only where training validates (`validate_every`), and
    only when `--steps` was not given: a given `--steps N` trains a fixed budget. 0: never stop early."""
    validation_inputs: int = Field(8, ge=1)
    """Held-out inputs each validation during training answers (the first ones; `eval_samples` answers each)."""
    max_steps_off_policy: int = Field(0, ge=0)
    """Train asynchronously (`autorl.PipelineTrainer`): the rollouts and their judging go on while a step trains,
    and a step may train on groups sampled up to this many policy versions (steps) before the one it updates;
    older ones are dropped and counted, tied ones too, and the loss corrects stale tokens by truncated importance
    sampling (`--importance-sampling-cap`). 0: the synchronous loop (rollouts, judging, then the update)."""
    max_unscored_steps: int = Field(3, ge=0)
    """Training steps in a row in which the judge could score no group (each such step trains nothing); one
    more ends the run with an error instead of a silent run of no-op steps. 0: no limit. (Steps whose groups
    all tied are not counted: a task learned to perfection ties too.)"""
    num_inputs: int | None = Field(None, ge=2)
    """Inputs to generate, train and validation together; unset: the task's `num_inputs`."""
    eval_samples: int = Field(2, ge=2)
    """Answers per validation input and variant in the baseline and evaluation stages (RULER compares, so at least 2)."""
    preflight: Literal["warn", "strict", "off"] = "warn"
    """Checks before and during training: the judge audit, the learnability check, the reward-hacking sentinel.
    warn: print what they find and go on; strict: stop the run (before training, or, with `--on-drift warn`, at
    the step the sentinel fires) unless the judge is reliable, the base model's groups carry signal and the
    policy stays near the base; off: no audit and no learnability check (the sentinel still acts as
    `--on-drift` says)."""
    system_prompt_check: int = Field(12, ge=0)
    """Training inputs on which the system prompt's candidates (the task text, a generated prompt, the task
    text with worked examples from the policy's own best answers) are scored before training, `eval_samples`
    answers under each; a candidate replaces the task text only where its gain's 95% interval is above 0, and
    only where the judge is reliable (a program judge, or a model judge whose audit says so). The report
    lists the candidates. 0: no check, and nothing generated: the task text is the system prompt."""
    audit_groups: int = Field(4, ge=1)
    """Judged groups the judge audit asks the judge about again (the learnability check's first, then the
    baseline's): two more judge requests each (the same answers in reverse order, and with one shown twice)."""
    learnability_groups: int = Field(4, ge=1)
    """Groups of `group_size` base-model answers to training inputs that the learnability check judges before
    training. The first `groups_per_step` are training step 1's groups (the base model is the policy
    before step 1; step 1 trains on them), so only the rest cost rollouts and judge requests."""
    on_tied: Literal["drop", "warn"] = "drop"
    """What the learnability check does when most groups of its sample tie (under half differ in score, so most
    training steps would change nothing): drop, answer and judge one group for each other training input with the
    base model too, and train on the inputs whose groups differ in score (on all of them when fewer than
    `groups_per_step` do); warn: only warn. The action is printed, and recorded in run.json and the report."""
    inputs_file: Path | None = None
    """JSONL file of the inputs (`input`, optional `split`): the inputs stage reads it instead of generating."""
    sft: SFTConfig = Field(default_factory=SFTConfig)
    """The supervised warm-up before RL (`--sft-file` or `--sft-bootstrap`); off unless one is given."""
    train: TrainConfig = Field(default_factory=TrainConfig)
    """Settings of every GRPO update: learning rate, loss, clip range, KL penalty, micro-batch size."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """How the policy's LoRA is built and trained: rank, alpha, dropout, target modules, dtype, seed."""
    sentinel: SentinelConfig = Field(default_factory=SentinelConfig)
    """What a run does when the reward-hacking sentinel finds the policy far from the base model while its
    reward rose (`--on-drift warn|stop|rollback`; a task file's sentinel table)."""
    keep_checkpoints: str = "all"
    """Which checkpoints training keeps: all (the default), or a comma-separated set of latest (the newest;
    latest:N, the newest N), best (by `validate_every`'s validation reward, else the training reward, as the evaluate stage and RUN@best pick it)
    and every:N (each Nth step); the others are deleted after each step (ART's latest,best keeps two).
    The newest is always kept, so a killed run resumes. Not part of any cache key."""
    seed: int = 0
    """Seed of input generation and of the train/validation split."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Policy sampling settings."""
    home: Path = DEFAULT_HOME
    """Where runs (`runs/<name>`) and the artifact cache (`artifacts/`) live."""
    name: str | None = None
    """Run name (letters, digits, '.', '_', '-'; a directory name under `runs/`); unset: one derived from the
    task text and the model."""
    wandb: bool = True
    """Log to Weights & Biases (offline unless WANDB_MODE says otherwise); --no-wandb takes W&B out of
    `report_to`."""
    report_to: list[str] | None = None
    """Trackers that get the run's metrics (TRL's report_to): wandb, mlflow (a file store under the run directory
    unless MLFLOW_TRACKING_URI is set), tensorboard (event files under the run directory), or none; unset:
    wandb. Each needs its package (`pip install 'autorl[mlflow]'`)."""
    price_per_hour: float = Field(0.0, ge=0)
    """USD per hour of the machine (or cluster) that serves and trains the policy: a stage's or step's seconds
    are priced at it; API models' tokens are priced at LiteLLM's price table. 0: seconds and tokens only."""
    budget_usd: float | None = Field(None, gt=0)
    """Stop the run at the end of the training step (or stage) at which its cost reaches this many USD; the
    same command with a higher budget continues it. Not part of any cache key."""
    budget_tokens: int | None = Field(None, ge=1)
    """Stop the run at the end of the training step (or stage) at which its model calls' tokens (policy, judge,
    generator; prompt and completion) reach this many; the same command with a higher budget continues it."""
    otlp_endpoint: str | None = None
    """Send the run's OpenTelemetry traces (run, stages, steps, rollouts, judge requests, updates) to this OTLP/HTTP
    traces URL (`http://127.0.0.1:6006/v1/traces` for a local Phoenix); unset: off, unless the standard
    OTEL_EXPORTER_OTLP_ENDPOINT variable is set. Needs `pip install 'autorl[tracing]'`."""
    force: list[str] = Field(default_factory=list)
    """Stages to recompute even if cached (each also recomputes the stages after it); "all" for every stage."""
    resume: bool = False
    """Reuse an existing run name even if its task differs (its record is replaced)."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    """How the local vLLM server is started. On CPU its KV cache is sized for `max_num_seqs` (32 unless set)
    sequences of `max_model_len` tokens: above a default run's largest batch (a training step's `group_size` x
    `groups_per_step` = 16 rollouts; ~10 validation inputs x `eval_samples` 2 in baseline and evaluate); a
    larger batch waits in vLLM's queue, which on a few CPU cores costs little throughput."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Where the policy is served and trained: this process (the default), or vLLM replicas and a trainer on a
    Ray cluster (a task file's `[cluster]` table). Not part of any cache key: a run gives the same artifacts
    either way, so a run moved to a cluster resumes from its local checkpoints and back."""
    backend: str | None = None
    """URL of an `autorl serve` (http://host:7999) that serves and trains the policy (`RemoteBackend`, with the
    token in AUTORL_TOKEN): the stages, the judge and the generator run here, the rollouts' model and its
    training there; after each step its checkpoint and the history are copied into this machine's run
    directory. The server serves every checkpoint as a LoRA (adapter serving), as the evaluation needs. Not
    with --ray; a task file's `backend` key. Not part of any cache key."""

    def unaided(self) -> RunConfig:
        """This config with the tools chosen by the model ("auto"): `--tool-choice required` is a training aid, so
        held-out answers, and a group's answers past `rollout.required_share`, are not forced."""
        return self.model_copy(update={"rollout": self.rollout.model_copy(update={"tool_choice": "auto"})})

    def forced_answers(self) -> int:
        """How many of a training group's answers have their first turn forced to a call (`rollout.tool_choice`
        "required", `rollout.required_share` of `group_size`, at least one)."""
        if self.rollout.tool_choice != "required":
            return 0
        return max(1, round(self.rollout.required_share * self.group_size)) if self.rollout.required_share else 0

    def judging(self) -> dict[str, str]:
        """What judged scores depend on besides the answers and the rubric: the judge, and whether it explains
        them (part of the key of every stage that judges)."""
        return {"judge": self.judge, "judge_explanations": self.judge_explanations}

    @field_validator("backend")
    @classmethod
    def _a_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r}: expected the URL of an `autorl serve`, http://host:port or https://host")
        return value

    @model_validator(mode="after")
    def _one_place(self) -> RunConfig:
        if self.cluster.ray is not None and self.backend is not None:
            raise ValueError("--ray and --backend name two places to train: give one")
        return self

    @field_validator("keep_checkpoints")
    @classmethod
    def _a_policy(cls, text: str) -> str:
        KeepPolicy.parse(text)
        return text

    @field_validator("report_to")
    @classmethod
    def _known_trackers(cls, names: list[str] | None) -> list[str] | None:
        for name in names or []:
            if name not in (*PACKAGES, "none"):
                raise ValueError(f"{name}: no such tracker; trackers are {', '.join(PACKAGES)} (or none)")
        return names

    @field_validator("otlp_endpoint")
    @classmethod
    def _an_http_url(cls, url: str | None) -> str | None:
        if url is not None and (urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc):
            raise ValueError(f"{url!r} is not an OTLP/HTTP URL (http://HOST:PORT/v1/traces)")
        return url

    @field_validator("inputs_file")
    @classmethod
    def _a_file_with_inputs(cls, path: Path | None) -> Path | None:
        if path is not None and path.is_file() and not path.read_text(encoding="utf-8", errors="replace").strip():
            raise ValueError(f"inputs file {path} is empty: one JSON object per line, with its `input`")
        return path

    @field_validator("name")
    @classmethod
    def _a_directory_name(cls, name: str | None) -> str | None:
        try:
            return None if name is None else check_run_name(name)
        except AutoRLError as exc:
            raise ValueError(str(exc)) from None

    def trackers(self) -> list[str]:
        """The trackers the run reports to: `report_to` (default W&B), without W&B under --no-wandb."""
        names = ["wandb"] if self.report_to is None else [n for n in self.report_to if n != "none"]
        return [n for n in names if n != "wandb" or self.wandb]

    @classmethod
    def for_task(cls, task: TaskSpec, given: dict[str, Any] | None = None) -> RunConfig:
        """The config of a run of `task`: the `given` values (nested models as dicts: `{"train": {"loss":
        "gspo"}}`) over the task's `[train]` / `[trainer]` / `[cluster]` / `[sentinel]` tables, `inputs_file`,
        `keep_checkpoints` and `backend`, over the defaults.
        A field set nowhere stays unset, so a loss's own defaults (`autorl.config.LOSS_DEFAULTS`) apply.

        Raises AutoRLError naming a task table's key that is no field or whose value is invalid, or a `[cluster]
        ray` or `backend` address off this machine that `given` does not name too (`check_off_machine`), and
        pydantic's ValidationError (located by field) for an invalid `given` value.
        """
        given = dict(given or {})
        check_off_machine("ray", task.cluster.get("ray"), (given.get("cluster") or {}).get("ray"))
        check_off_machine("backend", task.backend, given.get("backend"))
        values: dict[str, Any] = {
            name: getattr(task, name) for name in ("inputs_file", "keep_checkpoints", "backend") if getattr(task, name)
        }
        for table, strict in TASK_TABLES.items():
            settings = getattr(task, table)
            try:
                strict.model_validate(settings)
            except ValidationError as exc:
                error = exc.errors()[0]
                problem = describe_error({**error, "loc": (table, *error["loc"])}, strict)
                raise AutoRLError(f"the task's [{table}] table: {problem}") from None
            values[table] = {**settings, **given.pop(table, {})}
        return cls.model_validate({**values, **given})


LOCAL_RAY = ("local", "auto")
"""`[cluster] ray` values that stay on this machine: a cluster it starts, or the one it belongs to."""
OFF_MACHINE = {"ray": ("[cluster] ray", "the Ray cluster"), "backend": ("backend", "the `autorl serve`")}
"""The task file's keys that may send a run to another machine, and what they send it to."""


def check_off_machine(key: str, from_task: Any, from_command_line: str | None) -> None:
    """A task file is code a user may not have written: its `[cluster] ray` or its `backend` may name a machine
    other than this one (which would receive the run: its model, data and tools, and for `backend` the
    AUTORL_TOKEN) only when the command line names the same address (`--ray`, `--backend`). "local", "auto"
    and loopback addresses (`on_this_machine`) need no flag."""
    if not isinstance(from_task, str) or from_task in LOCAL_RAY or from_task == from_command_line:
        return
    if on_this_machine(from_task):
        return
    where, what = OFF_MACHINE[key]
    raise AutoRLError(
        f"the task's {where} sends the run to {what} at {from_task!r}, off this machine; a task file cannot do "
        f"that alone: pass --{key} {from_task} too if you mean it"
    )


NETLOC = re.compile(r"[A-Za-z0-9.:\[\]-]+")
"""What a loopback address's host and port may be written with: no userinfo ('@'), no escapes or spaces that
one URL parser reads differently from another."""


def on_this_machine(address: str) -> bool:
    """Whether `address` (`host:port`, or a URL such as `http://host:port/...` or `ray://host:port`) names this
    machine by loopback: its host is a loopback IP (`127.0.0.0/8`, `::1`), or `localhost` when every address it
    resolves to is one. Any other name is off the machine even when it resolves to loopback now
    (`127.0.0.1.nip.io`): its owner may answer differently when the run connects."""
    try:
        parts = urlsplit(address if "//" in address else f"//{address}")
        host, _ = parts.hostname, parts.port  # .port raises ValueError for a port that is not one
    except ValueError:
        return False
    if host is None or not NETLOC.fullmatch(parts.netloc):
        return False
    if host == "localhost":
        try:
            resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
        except OSError:
            return False
        return bool(resolved) and all(is_loopback_ip(ip) for ip in resolved)
    return is_loopback_ip(host)


def is_loopback_ip(text: str) -> bool:
    """Whether `text` is an IP address literal of the loopback range."""
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


TASK_TABLES: dict[str, type[BaseModel]] = {
    table: type(model.__name__, (model,), {"model_config": ConfigDict(extra="forbid")})
    for table, model in (
        ("train", TrainConfig),
        ("trainer", TrainerConfig),
        ("cluster", ClusterConfig),
        ("sentinel", SentinelConfig),
    )
}
"""The task file's tables of run settings, each checked against its config model with unknown keys refused."""
