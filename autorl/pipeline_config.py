"""ART's 2026 settings objects of `PipelineTrainer` (`art.PipelineRuntimeConfig`, `art.PipelineAutotuneConfig`)
and of its metrics (`art.MetricDefinition`, `art.PIPELINE_RL_METRIC_DEFINITIONS`): the pipeline's sizes as one
object, and what each figure autorl's `PipelineTrainer` logs means."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import UnsupportedArgumentError


class PipelineRuntimeConfig(BaseModel):
    """The pipeline's sizes, as ART groups them (`PipelineTrainer(..., pipeline=PipelineRuntimeConfig(...))`);
    given, they replace the keywords of the same names."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    num_rollout_workers: int = Field(4, ge=1)
    """Scenarios answered at once, at most."""
    min_batch_size: int = Field(4, ge=1)
    """Groups a training step waits for."""
    max_batch_size: int | None = Field(None, ge=1)
    """Groups a step takes when more are waiting (default: `min_batch_size`)."""
    max_steps_off_policy: int = Field(4, ge=0)
    """How many policy versions older than the one being trained a group may be; older groups are dropped."""
    queue_maxsize: int | None = Field(None, ge=1)
    """Finished groups waiting to be trained, at most (default: max_batch_size x max(1, max_steps_off_policy))."""
    score_reference_groups_per_step: None = None
    """ART's reference for its throughput score; autorl computes no score: only None."""

    @model_validator(mode="after")
    def _batch_bounds(self) -> PipelineRuntimeConfig:
        if self.max_batch_size is not None and self.max_batch_size < self.min_batch_size:
            raise ValueError("max_batch_size must be >= min_batch_size")
        return self


class PipelineAutotuneConfig(BaseModel):
    """ART's autotuner settings. autorl has no autotuner: `mode="off"` (ART's default) is accepted with any of
    ART's tuning fields; another mode is one `UnsupportedArgumentError` line when the trainer is made."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    mode: Literal["off", "online", "profile"] = "off"
    """"off": the sizes stay as given (the only mode autorl runs)."""


def runtime_settings(
    pipeline: PipelineRuntimeConfig | None,
    autotune: PipelineAutotuneConfig | None,
    given: tuple[int, int, int | None, int, int | None],
) -> tuple[int, int, int | None, int, int | None]:
    """(num_rollout_workers, min_batch_size, max_batch_size, max_steps_off_policy, queue_maxsize): `pipeline`'s
    where it is given, else `given` (the trainer's keywords); an autotuner asked for is one error line."""
    if autotune is not None and autotune.mode != "off":
        raise UnsupportedArgumentError(
            f"PipelineTrainer: autotune mode {autotune.mode!r}: autorl has no autotuner; set the sizes with "
            "PipelineRuntimeConfig (autotune mode 'off')"
        )
    if pipeline is None:
        return given
    p = pipeline
    return p.num_rollout_workers, p.min_batch_size, p.max_batch_size, p.max_steps_off_policy, p.queue_maxsize


class MetricDefinition(BaseModel):
    """What a logged metric means (ART's): its key, a title and description, its kind and unit, and whether more
    is better."""

    model_config = ConfigDict(use_attribute_docstrings=True, frozen=True)

    key: str
    """The metric's name as logged (`discarded/cum/stale_groups`)."""
    title: str
    description: str
    kind: Literal["counter", "duration", "gauge", "rate", "ratio", "score"]
    unit: str | None = None
    higher_is_better: bool | None = None
    dashboard_default: bool = False
    """Shown by default on a dashboard of the run."""
    score_component: bool = False
    """Part of ART's throughput score (none of autorl's: it computes no score)."""


def _metric(key: str, title: str, description: str, kind: str, **more: object) -> MetricDefinition:
    return MetricDefinition(key=key, title=title, description=description, kind=kind, **more)  # type: ignore[arg-type]


PIPELINE_RL_METRIC_DEFINITIONS: tuple[MetricDefinition, ...] = (
    _metric(
        "discarded/step/stale_groups",
        "Stale groups",
        "groups dropped in this step: sampled more than max_steps_off_policy versions ago",
        "counter",
        unit="groups",
        higher_is_better=False,
        dashboard_default=True,
    ),
    _metric(
        "discarded/step/zero_variance_groups",
        "Tied groups",
        "groups dropped in this step: every reward equal, nothing to learn",
        "counter",
        unit="groups",
        higher_is_better=False,
        dashboard_default=True,
    ),
    _metric(
        "discarded/cum/stale_groups",
        "Stale groups (run)",
        "stale groups dropped in the run so far",
        "counter",
        unit="groups",
        higher_is_better=False,
    ),
    _metric(
        "discarded/cum/zero_variance_groups",
        "Tied groups (run)",
        "tied groups dropped in the run so far",
        "counter",
        unit="groups",
        higher_is_better=False,
    ),
    _metric(
        "discarded/cum/failed_groups",
        "Failed groups (run)",
        "groups whose every rollout raised, in the run so far",
        "counter",
        unit="groups",
        higher_is_better=False,
    ),
    _metric(
        "discarded/rate/stale_groups",
        "Stale rate",
        "stale groups over all groups made in the run",
        "ratio",
        higher_is_better=False,
        dashboard_default=True,
    ),
    _metric(
        "discarded/rate/zero_variance_groups",
        "Tied rate",
        "tied groups over all groups made in the run",
        "ratio",
        higher_is_better=False,
    ),
    _metric(
        "staleness/mean",
        "Mean staleness",
        "versions between the policy that sampled a trained group and the one it trained",
        "gauge",
        unit="steps",
        higher_is_better=False,
        dashboard_default=True,
    ),
    _metric(
        "staleness/max",
        "Max staleness",
        "the most stale of the step's trained groups",
        "gauge",
        unit="steps",
        higher_is_better=False,
    ),
    _metric(
        "queue/groups_depth",
        "Queue depth",
        "finished groups waiting to be trained when the step began",
        "gauge",
        unit="groups",
    ),
)
"""The figures autorl's `PipelineTrainer` adds to each step's metrics (and `staleness/hist/K`, a count per age K)."""
PIPELINE_RL_DASHBOARD_DEFAULT_METRICS = tuple(d.key for d in PIPELINE_RL_METRIC_DEFINITIONS if d.dashboard_default)
PIPELINE_RL_SCORE_METRICS = tuple(d.key for d in PIPELINE_RL_METRIC_DEFINITIONS if d.score_component)
"""Empty: autorl computes no throughput score."""
