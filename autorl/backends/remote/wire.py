"""The wire format of `autorl serve`: what `RemoteBackend` (client.py) sends and the server (app.py) answers.

One module both sides import, so they cannot drift: JSON bodies of the request models below, answers as JSON
(the answer models), errors as `{"error": "<one line>"}` with a 4xx status. Every path but /health needs the
server's token (`Authorization: Bearer ...`, as OpenAI clients send their key) and training paths the
client's id (`CLIENT_HEADER`). Names of models and projects are directory names on the server (`check_name`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, model_validator

from ...config import TrainConfig, TrainerConfig
from ...errors import QUOTED_CHARS, AutoRLError, quoted
from ...trajectories import Trajectory, TrajectoryGroup
from ...types import TrainSFTConfig

DEFAULT_PORT = 7999
"""`autorl serve`'s port unless told otherwise (ART's server's)."""
URL_ENV = "AUTORL_URL"
"""The server's URL when `RemoteBackend` is given none."""
TOKEN_ENV = "AUTORL_TOKEN"
"""The server's token: what `autorl serve` accepts, and what `RemoteBackend` sends when given no `api_key`."""
CLIENT_HEADER = "X-AutoRL-Client"
"""The id of one `RemoteBackend` (random, per instance): a model is trained by one client at a time."""
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""A model's or project's name on a server: a directory name (no '/', no leading '.' or '-', no '@')."""
MAX_STEP = 10**9 - 1
"""The highest step a client may name (a checkpoint's directory is its step in digits)."""
Step = Annotated[int, Field(ge=0, le=MAX_STEP)]
"""A step in an answer: a server's answer is read as bounded as a client's request."""
InferenceName = Annotated[str, Field(min_length=1, max_length=256)]
MetricName = Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]{1,128}$")]
"""A metric's name a client sends: printable (no line of the server's log is forged), at most 128 characters."""
GZIP_OVER_BYTES = 64 * 1024
"""Request bodies larger than this are sent gzip-compressed (trajectories' JSON, logprobs included, compresses well)."""
CLIENT_SET = frozenset({"host", "port", "extra_args"})
"""`ServerConfig` fields a client may not set for its model (`RegisterRequest.server`): the vLLM servers stay on
loopback behind `autorl serve`, on ports it picks, with the flags it was started with."""
M = TypeVar("M", bound=BaseModel)


def check_trajectories(groups: list[TrajectoryGroup]) -> None:
    """A ValueError naming the first trajectory without messages: nothing to train on or record."""
    for g, group in enumerate(groups):
        for t, trajectory in enumerate(group.trajectories):
            if not trajectory.messages_and_choices:
                raise ValueError(f"groups.{g}.trajectories.{t}: a trajectory needs its messages")


class RegisterRequest(BaseModel):
    """`POST /models`: serve a model (its newest checkpoint, if it has one)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    project: str = "default"
    base_model: str
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    server: dict[str, Any] = Field(default_factory=dict)
    report_metrics: list[MetricName] | None = Field(None, max_length=256)


class Registered(BaseModel):
    """The answer to `POST /models` and `POST /models/NAME/serve`."""

    step: Step
    inference_name: InferenceName
    """The name to request in chat completions: `name@NNNN` (`name` alone is the newest checkpoint)."""


class TrainRequest(BaseModel):
    """`POST /models/NAME/train`: one GRPO step, or with `sft`, one supervised step on `trajectories`."""

    model_config = ConfigDict(extra="forbid")

    groups: list[TrajectoryGroup] = Field(default_factory=list)
    config: TrainConfig = Field(default_factory=TrainConfig)
    sft: TrainSFTConfig | None = None
    """A supervised step (`train_sft`) of these settings on `trajectories`, instead of a GRPO step."""
    trajectories: list[Trajectory] = Field(default_factory=list)
    """The supervised step's trajectories."""
    step_id: str = Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    """Chosen by the client, the same on every try of one step: a step the server finished is answered
    from its record instead of trained again."""

    @model_validator(mode="after")
    def _trajectories_with_messages(self) -> TrainRequest:
        check_trajectories(self.groups)
        return self


class StepAnswer(BaseModel):
    """The answer to `GET /models/NAME/step`."""

    step: Step


class Steps(BaseModel):
    """The answer to `GET /models/NAME/checkpoints`."""

    steps: list[Annotated[int, Field(ge=1, le=MAX_STEP)]]


class Deleted(BaseModel):
    """The answer to `POST /models/NAME/delete_checkpoints`."""

    deleted: list[int]


class History(BaseModel):
    """The answer to `GET /models/NAME/history`."""

    history: list[dict[str, Any]]


class Figures(RootModel[dict[str, float | None]]):
    """The answer to `POST /models/NAME/log`: the figures recorded."""


class Trained(BaseModel):
    """The answer to `POST /models/NAME/train`."""

    metrics: dict[str, Any]
    """The step's metrics, with `step` (as `LocalBackend.train` returns them)."""
    inference_name: InferenceName


class LogRequest(BaseModel):
    """`POST /models/NAME/log`: an evaluation batch (`Model.log`)."""

    model_config = ConfigDict(extra="forbid")

    project: str = "default"
    trainable: bool = True
    report_metrics: list[MetricName] | None = Field(None, max_length=256)
    groups: list[TrajectoryGroup] = Field(default_factory=list)
    split: str = Field("val", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    metrics: dict[MetricName, Annotated[float, Field(allow_inf_nan=False)]] = Field(default_factory=dict)
    """Finite figures only: one of them may choose the best checkpoint (`delete_checkpoints(best)`)."""
    step: int | None = Field(None, ge=0, le=MAX_STEP)

    @model_validator(mode="after")
    def _trajectories_with_messages(self) -> LogRequest:
        check_trajectories(self.groups)
        return self


class DeleteRequest(BaseModel):
    """`POST /models/NAME/delete_checkpoints`."""

    model_config = ConfigDict(extra="forbid")

    best_checkpoint_metric: MetricName = "val/reward"
    keep: str = Field("latest,best", max_length=200)


class ServeRequest(BaseModel):
    """`POST /models/NAME/serve`: serve checkpoint `step` (`Backend.serve_checkpoint`)."""

    model_config = ConfigDict(extra="forbid")

    step: Step


def check_name(name: str, what: str = "model name") -> str:
    """`name` if a server takes it (`NAME`), else one `AutoRLError` line."""
    if not NAME.fullmatch(name):
        raise AutoRLError(
            f"{what} {quoted(name)}: use letters, digits, '.', '_' and '-' (no '/', no leading '.' or '-', no '@')"
        )
    return name


def invalid_line(exc: ValidationError) -> str:
    """A request's or an answer's first validation error as one printable line, `where: why`: its field's path (a
    part that is no short printable name, a metric's name holding a NUL, quoted: `quoted`), then why."""
    first = exc.errors()[0]
    parts = [str(part) for part in first["loc"]]
    where = ".".join(part if len(part) <= QUOTED_CHARS and part.isprintable() else quoted(part) for part in parts)
    why = " ".join(first["msg"].removeprefix("Value error, ").split())
    return f"{where}: {why}" if where else why


def built(kind: type[M], what: str, **fields: Any) -> M:
    """The request `kind(**fields)` a client sends; one `AutoRLError` line naming `what` (the call that sends it)
    and the field when a value is not one the server takes, before anything is sent."""
    try:
        return kind(**fields)
    except ValidationError as exc:
        raise AutoRLError(f"{what}: {invalid_line(exc)}") from None
