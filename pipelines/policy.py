"""The policy a run trains (`Policy`): its server, its model's checkpoints and the task's tools, and one rollout of
it on an input (`task_rollout`); `autorl benchmark` serves a recorded run's policy the same way."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from autorl import TrainableModel, tracing
from autorl.activity import activity
from autorl.agents.rollout import Complete, agent_rollout, openai_completion
from autorl.agents.tools import Toolbox
from autorl.backends import make_backend
from autorl.backends.base import Backend
from autorl.backends.run_dir import ensure_writable
from autorl.serving.config import ServerConfig, cuda_available
from autorl.serving.embedded import embedded_endpoint, resolve_base_model, stop_shared_servers
from autorl.serving.scoring import prompt_logprobs
from autorl.serving.vllm_server import compile_cache
from autorl.task import TaskSpec
from autorl.threads import in_daemon_thread
from autorl.training.sequences import Sequence, tokenize_trajectory
from autorl.trajectories import Trajectory

from .config import RunConfig
from .records.pricing import Meter

COMPILE_PAYS_WARM = 10_000
"""Policy tokens from which a run on CPU starts its policy's server compiled when this machine's compile cache
is warm: a compiled start takes ~35 s longer and then decodes ~0.0036 s a token faster at 16 requests in flight
(`benchmarks/perf/perf_server_start.py --set compile`), so it pays back from about this many tokens."""
COMPILE_PAYS_COLD = 50_000
"""The same before the first compile on this machine (no compile cache: the start takes ~3 minutes longer)."""
TRAIN_PROJECT = "train"
"""The project of every run's policy model: its run directory is `<artifacts>/train/<train key>`, the train stage's
artifact directory."""


def planned_tokens(config: RunConfig) -> int:
    """The tokens the run's policy may generate in training and in its final evaluation (the base and the trained
    checkpoint): its answers times `rollout.max_tokens` (one turn each: a tool task's later turns add more, which
    only favours the compile further)."""
    answers = (
        config.steps * config.groups_per_step * config.group_size + 2 * config.validation_inputs * config.eval_samples
    )
    return answers * config.rollout.max_tokens


def policy_server(config: RunConfig) -> ServerConfig:
    """How the policy's server starts: `config.server`, and where its `enforce_eager` is unset (None) for a local
    run on CPU, eager unless the run plans enough tokens (`planned_tokens`) for the compile to pay
    (`COMPILE_PAYS_WARM`, or `COMPILE_PAYS_COLD` when nothing was compiled on this machine yet)."""
    server = config.server
    if server.enforce_eager is not None or config.cluster.ray or config.backend or cuda_available():
        return server
    pays = COMPILE_PAYS_WARM if compile_cache().is_dir() else COMPILE_PAYS_COLD
    return server.model_copy(update={"enforce_eager": planned_tokens(config) < pays})


class Policy:
    """The policy model on a local vLLM server (or replicas on a Ray cluster, or an `autorl serve` elsewhere:
    `RunConfig.cluster`), and the task's tools; each started on first use (a fully cached run starts neither;
    on a cluster it still joins Ray, so that an unreachable address fails before any stage runs).

    connect: make the backend now (a run: a cluster's replicas then answer the embedded judge, and an unreachable
    cluster or server fails first); False: on first use, so that a reader of a recorded run's files (`autorl
    export`) joins no Ray cluster and needs no server's token.
    """

    def __init__(
        self,
        config: RunConfig,
        artifacts: Path,
        train_key: str,
        calls: Counter,
        task: TaskSpec,
        log_dir: Path,
        connect: bool = True,
    ):
        self._config, self._artifacts = config, artifacts
        self._backend = self._make_backend() if connect else None
        self.model = TrainableModel(  # W&B: the run's own Tracker logs its steps (report_metrics=[]: not twice)
            name=train_key, project=TRAIN_PROJECT, base_model=config.model, trainer=config.trainer, report_metrics=[]
        )
        self.task = task
        self._log_dir = log_dir
        self._calls = calls
        self.meter = Meter()
        """The tokens of the policy's rollouts in this process (`pipelines.records.pricing`)."""
        self._client = None
        self._toolbox: Toolbox | None = None
        self._tokenizer = None
        self._lock = asyncio.Lock()

    @property
    def backend(self) -> Backend:
        """Where the policy is served and trained (made on first use unless `connect`)."""
        if self._backend is None:
            self._backend = self._make_backend()
        return self._backend

    def _make_backend(self) -> Backend:
        return make_backend(self._artifacts, policy_server(self._config), self._config.cluster, self._config.backend)

    @property
    def run_dir(self) -> Path:
        """Where training writes checkpoints and history (the train stage's artifact directory): every backend of
        `make_backend` keeps the model's run directory, or its copy (`RemoteBackend`'s mirror), there."""
        return self._artifacts / self.model.project / self.model.name

    async def start(self, with_embedded: bool = False) -> None:
        """Start the policy's server (once). with_embedded: the embedded judge or generator will ask for the
        embedded model's plain weights too; where the policy's server cannot serve them (merged serving on this
        machine: its weights change with training), the embedded model's shared server starts at the same time,
        so the two starts overlap instead of running one after the other. The embedded one starts on a daemon
        thread: when the policy's start fails (an unknown model, a port in use), the error comes at once, nothing
        waits for the other start, and that start is stopped."""
        async with self._lock:
            if self._client is None:
                embedded = None
                if with_embedded and self.starts_apart_from_embedded():
                    self.check_can_start()  # what would fail the policy's start fails before either starts
                    embedded = in_daemon_thread(embedded_endpoint, stay=True)  # the server dies with its thread
                try:
                    await self.model.register(self.backend)
                except BaseException:
                    if embedded is not None and not embedded.done():
                        stop_shared_servers()  # the run ends here: the start made for it does not go on
                    raise
                if embedded is not None:
                    await embedded
                self._client = self.model.openai_client()

    def check_can_start(self) -> None:
        """Raise the error line the policy server's start would end in at once: a run directory that cannot be
        written; on this machine, an unknown model or a port in use; an `autorl serve` that does not answer or
        refuses the token."""
        ensure_writable(self.run_dir)
        self.backend.check_can_start(self.model)

    def starts_apart_from_embedded(self) -> bool:
        """Whether the embedded model's plain weights need a server of their own beside the policy's: with the
        policy on an `autorl serve`, or on this machine with merged serving (adapter serving keeps the base
        weights servable, and the embedded endpoint reuses the policy's server; a cluster has replicas of its
        own for them)."""
        return self.backend.starts_embedded_apart()

    def beside_embedded_on_cpu(self) -> bool:
        """Whether the policy's server and the embedded model's are two vLLM engines on this machine's CPU
        (merged serving without CUDA), which slow each other down when both decode at once."""
        return self.backend.shares_cpu_with_embedded()

    async def toolbox(self) -> Toolbox | None:
        """The task's tools, opened on first use (its MCP servers start then, once per run); None when the
        task has no tools."""
        if not self.task.has_tools():
            return None
        async with self._lock:
            if self._toolbox is None:
                self._toolbox = await Toolbox.open(self.task, log_dir=self._log_dir)
        return self._toolbox

    async def answer(
        self,
        system_prompt: str,
        text: str,
        config: RunConfig,
        name: str | None = None,
        demos: list[dict] | None = None,
    ) -> Trajectory:
        """One rollout of the policy (the newest LoRA, or the model served as `name`) with the task's tools,
        after the earlier turns `demos` if any."""
        await self.start()
        self._calls["policy"] += 1
        served = name or self.model.get_inference_name()
        if (shown := self.shown_name(served)) is not None:
            tracing.name_model(served, shown)
        complete = openai_completion(self._client, served, config.rollout)
        attributes = {"gen_ai.request.model": served, "autorl.input": text[:500], **tracing.io(input=text)}
        with tracing.span("autorl.rollout", attributes) as span, activity("policy"):
            trajectory = await task_rollout(complete, system_prompt, text, self.task, await self.toolbox(), demos)
            answer = trajectory.messages()[-1].get("content") if trajectory.messages() else None
            tracing.set_attributes(
                span, {**{f"autorl.{k}": v for k, v in trajectory.metrics.items()}, **tracing.io(output=answer)}
            )
        if span is not None:  # the trajectory links to its trace
            trajectory.metadata.update(tracing.ids(span))
        metrics = trajectory.metrics
        self.meter.add("policy", config.model, metrics.get("prompt_tokens", 0), metrics.get("completion_tokens", 0))
        return trajectory

    async def base_logprobs(self, trajectories: list[Trajectory]) -> list[tuple[Sequence, list[float | None] | None]]:
        """Each trajectory as the trainer tokenizes it, and each of its tokens' logprob under the base model
        (None for a trajectory the server could not score), scored by the policy's server serving step 0
        (with merged serving the base weights are swapped back in)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer  # transformers: loaded when drift is measured only

            directory = resolve_base_model(self.model.base_model)
            self._tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, directory)
        sequences = [tokenize_trajectory(t, self._tokenizer) for t in trajectories]
        base = await self.serve_step(0)
        said = f"the base model's logprob of each token of {len(sequences)} answers (how far the policy drifted)"
        attributes = {"gen_ai.request.model": base, "autorl.tokens": sum(len(s.input_ids) for s in sequences)}
        # one span says what these calls are; their own (token ids in, every token's logprob out) are left out
        with tracing.span("autorl.base_logprobs", {**attributes, **tracing.io(input=said)}), tracing.unrecorded():
            if self.serves_adapters():  # one at a time: see `serves_adapters`
                scored = [await prompt_logprobs(self._client, base, s.input_ids) for s in sequences]
            else:
                scored = await asyncio.gather(*(prompt_logprobs(self._client, base, s.input_ids) for s in sequences))
        return list(zip(sequences, scored, strict=True))

    def serves_adapters(self) -> bool:
        """Whether the policy's server has vLLM's LoRA support on (adapter serving; an `autorl serve` is asked
        for it). vLLM 0.32 on CPU with it on crashes its engine on prompt_logprobs requests batched together
        ("einsum(): subscript b has size 7 ... does not broadcast"; one request at a time is answered), which
        `base_logprobs` therefore sends one after the other."""
        return self.backend.serves_adapters()

    async def serve_step(self, step: int) -> str:
        """The served name of checkpoint `step` (the base model for 0), loading it if needed."""
        await self.start()
        return await self.backend.serve_checkpoint(self.model, step)

    def shown_name(self, served: str) -> str | None:
        """How a trace names the policy served as `served` (a cache key, `KEY@NNNN` a checkpoint): the base model,
        with the LoRA's step where the name says it; None for a name that is not the policy's."""
        base, (key, at, step) = self.model.base_model, served.partition("@")
        if key != self.model.name:
            return None
        if not at or not step.isdigit():
            return f"{base} + LoRA (newest step)"
        return base if int(step) == 0 else f"{base} + LoRA step {int(step)}"

    async def aclose(self) -> None:
        """Stop the task's MCP servers and the policy's vLLM server."""
        try:
            if self._toolbox is not None:
                await self._toolbox.aclose()
        finally:
            if self._backend is not None:
                self._backend.close()


async def task_rollout(
    complete: Complete,
    system_prompt: str,
    text: str,
    task: TaskSpec,
    toolbox: Toolbox | None,
    demos: list[dict] | None = None,
) -> Trajectory:
    """One answer to the input `text` by the model behind `complete`, with the task's tools and turns, after
    the earlier turns `demos` (demonstrations) if any."""
    turns = task.max_turns if toolbox is not None else 1
    return await agent_rollout(
        complete, system_prompt, text, toolbox=toolbox, max_turns=turns, metadata={"input": text}, demos=demos
    )
