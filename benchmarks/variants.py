"""Agent variants for `autorl benchmark`: what a variant name means, and its answers to the held-out inputs.

A variant is written as one of
    base                        the benchmarked run's base model, without a LoRA
    RUN@latest, RUN@best        a run's newest checkpoint, or its best (highest mean training reward)
    RUN@0005 (or RUN@5)         a run's checkpoint of step 5
    provider/model              any LiteLLM model (openai/gpt-4.1-mini; the key comes from the provider's variable)
    name@http://host:port/v1    model `name` on any OpenAI-compatible server (it is sent no key)
optionally followed by `+prompt=FILE`: the same model with the system prompt in FILE. Otherwise a
checkpoint answers with its own run's system prompt, and `base` and API models with the benchmarked run's.

Base and checkpoints of a run are served by that run's policy server (one local vLLM server, serving
one checkpoint after the other: merged into the weights under merged serving, the CPU default, or as a
LoRA requested by its own name under adapter serving); runs are served one after another, never two
servers at once.
Answers are cached in the artifact store, one artifact `benchmark_answers/<key>/` per variant and
input, keyed by what they depend on: the model (for a checkpoint, the hash of its LoRA weights), the
system prompt, the input, the number of samples and the sampling settings.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autorl import gather_trajectory_groups
from autorl.checkpoints import checkpoint_name, complete_checkpoints
from autorl.errors import AutoRLError
from autorl.inputs import read_input_rows
from autorl.model import Model
from autorl.rollout import Complete, RolloutConfig, Turn, openai_completion
from autorl.task import TaskSpec
from autorl.trajectories import Trajectory, TrajectoryGroup
from pipelines.artifacts import ArtifactStore, code_version, stage_key
from pipelines.config import RunConfig
from pipelines.context import Policy, task_rollout
from pipelines.runs import load_run
from pipelines.stages import inputs, system_prompt, train
from ruler.endpoint import LiteLLMTarget, ModelEndpoint, import_litellm
from ruler.errors import ModelSpecError
from ruler.retry import describe

STAGE = "benchmark_answers"
FILE = "answers.jsonl"
PROMPT_SUFFIX = "+prompt="
FORMS = (
    "base, RUN@latest, RUN@best, RUN@NNNN, provider/model (LiteLLM) or name@http://host:port/v1, "
    f"each optionally followed by {PROMPT_SUFFIX}FILE"
)
_CHECKPOINT = re.compile(r"^(?P<run>[^@/\s]+)@(?P<which>[^@/\s]+)$")


class RunView:
    """A recorded run, read from `<home>/runs/<name>/run.json`: its config, stage keys, and policy (not started).

    It has what the pipeline's stage helpers read from a stage context (`config`, `store`, `keys`,
    `policy`, `artifact()`), so `inputs.load`, `system_prompt.load` and `train.best_step` work on it.
    """

    def __init__(self, home: Path, name: str, calls: Counter):
        record = load_run(home, name)
        self.home, self.name, self.record, self.calls = Path(home), name, record, calls
        self.keys: dict[str, str] = record.get("keys") or {}
        if "train" not in self.keys:
            raise AutoRLError(f"run {name!r} has no stage keys in its run.json; run it with `autorl run` first")
        try:
            self.config = RunConfig.model_validate(record["config"])
        except (KeyError, ValidationError) as exc:
            raise AutoRLError(f"run {name!r}: its run.json has no valid config ({describe(exc)})") from None
        try:
            self.task = TaskSpec.model_validate(record["task"])
        except (KeyError, ValidationError) as exc:
            raise AutoRLError(f"run {name!r}: its run.json has no valid task ({describe(exc)})") from None
        self.store = ArtifactStore(Path(home) / "artifacts")
        run_dir = Path(home) / "runs" / name
        self.policy = Policy(self.config, self.store.root, self.keys["train"], calls, self.task, run_dir / "logs")

    def artifact(self, stage: str) -> Path:
        return self.store.path(stage, self.keys[stage])

    def checkpoints(self) -> list[tuple[int, Path]]:
        return complete_checkpoints(self.policy.run_dir / "checkpoints")

    def system_prompt(self) -> str:
        try:
            return system_prompt.load(self)
        except (KeyError, FileNotFoundError):
            raise AutoRLError(
                f"run {self.name!r} has no system prompt yet (its system_prompt stage has not run)"
            ) from None

    def validation_inputs(self) -> list[str]:
        try:
            texts = inputs.load(self, "val")
        except (KeyError, FileNotFoundError):
            raise AutoRLError(
                f"run {self.name!r} has no inputs yet (its inputs stage has not run); pass --inputs FILE"
            ) from None
        if not texts:
            raise AutoRLError(f"run {self.name!r} has no validation inputs; pass --inputs FILE")
        return texts

    @property
    def rubric(self) -> str | None:
        return (self.record.get("task") or {}).get("rubric") or None


@dataclass
class Variant:
    """One resolved variant: what answers, with which system prompt."""

    label: str
    """The variant as written on the command line; its name in every table."""
    system_prompt: str
    identity: dict[str, Any]
    """What its answers depend on besides the prompt, input and sampling (never a key)."""
    run: RunView | None = None
    """For the base model and checkpoints: the run whose server serves it."""
    step: int = 0
    """For a run's variant: the checkpoint step (0: the base model)."""
    api: ModelEndpoint | None = None
    """For an API model: the model, and its endpoint when it is `name@URL`."""


@dataclass
class Answers:
    """A variant's answers: `samples` trajectories per input it answered, and why any failed."""

    by_input: dict[str, list[Trajectory]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def parse_variants(text: str) -> list[str]:
    """The comma-separated variants of `--variants`, each once."""
    labels = [part.strip() for part in text.split(",") if part.strip()]
    if not labels:
        raise AutoRLError(f"--variants is empty; give one or more of: {FORMS}")
    if repeated := [label for label, count in Counter(labels).items() if count > 1]:
        raise AutoRLError(f"variant {repeated[0]!r} is given twice")
    return labels


def read_input_texts(path: Path) -> list[str]:
    """The `input` field of every row of a JSONL file (`autorl.inputs.read_input_rows`; other fields are
    ignored), each text once."""
    return list(dict.fromkeys(row.input for row in read_input_rows(path)))


def resolve(label: str, main: RunView, runs: dict[str, RunView]) -> Variant:
    """The variant `label` names; `runs` holds the runs opened so far (by name) and gains any other it names.

    Raises an `AutoRLError` naming the variant and what exists when it resolves to nothing.
    """
    spec, _, prompt_file = label.partition(PROMPT_SUFFIX)
    if spec == "base":
        variant = Variant(label, main.system_prompt(), {"base_model": main.config.model, "lora": None}, main, 0)
    elif "/" in spec:  # provider/model, or name@http://host:port/v1
        api = _api_model(label, spec)
        variant = Variant(label, main.system_prompt(), api.model_dump(include={"model", "base_url"}), api=api)
    elif match := _CHECKPOINT.match(spec):
        if match["run"] not in runs:
            try:
                runs[match["run"]] = RunView(main.home, match["run"], main.calls)
            except AutoRLError as exc:
                raise AutoRLError(f"variant {label!r}: {exc}") from None
        run = runs[match["run"]]
        step = _checkpoint_step(run, match["which"], label)
        lora = run.policy.run_dir / "checkpoints" / checkpoint_name(step) / "adapter_model.safetensors"
        identity = {"base_model": run.config.model, "lora": hashlib.sha256(lora.read_bytes()).hexdigest()[:20]}
        variant = Variant(label, run.system_prompt(), identity, run, step)
    else:
        raise AutoRLError(f"variant {label!r} resolves to nothing; use {FORMS}")
    if prompt_file:
        variant.system_prompt = _read_prompt(Path(prompt_file), label)
    return variant


def _api_model(label: str, spec: str) -> ModelEndpoint:
    try:
        model = ModelEndpoint.parse(spec)
        model.check_provider()
    except ModelSpecError:
        raise AutoRLError(
            f"variant {label!r} resolves to nothing (no known LiteLLM provider/model, nor name@URL); use {FORMS}"
        ) from None
    return model


def _checkpoint_step(run: RunView, which: str, label: str) -> int:
    steps = [step for step, _ in run.checkpoints()]
    if not steps:
        raise AutoRLError(f"variant {label!r}: run {run.name!r} has no checkpoints yet")
    listing = ", ".join(checkpoint_name(step) for step in steps)
    if which == "latest":
        return steps[-1]
    if which == "best":
        best = train.best_step(run)
        return best if best in steps else steps[-1]
    if which.isdigit():
        if int(which) in steps:
            return int(which)
        raise AutoRLError(
            f"variant {label!r}: run {run.name!r} has no checkpoint {checkpoint_name(int(which))} (checkpoints: {listing})"
        )
    raise AutoRLError(
        f"variant {label!r}: {which!r} is not a checkpoint; use latest, best or a step (run {run.name!r} has {listing})"
    )


def _read_prompt(path: Path, label: str) -> str:
    if not path.is_file():
        raise AutoRLError(f"variant {label!r}: system prompt file {path} does not exist")
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise AutoRLError(f"variant {label!r}: system prompt file {path} is empty")
    return text


def answer_key(variant: Variant, text: str, samples: int, rollout: RolloutConfig, task: TaskSpec) -> str:
    config = {
        "variant": variant.identity,
        "system_prompt": variant.system_prompt,
        "input": text,
        "samples": samples,
        "rollout": rollout.model_dump(),
        **task.agent_settings(),
    }
    return stage_key(STAGE, config, code_version(sys.modules[__name__]), {})


async def answer_all(
    variants: list[Variant],
    texts: list[str],
    samples: int,
    rollout: RolloutConfig,
    store: ArtifactStore,
    calls: Counter,
    tools: Policy,
) -> dict[str, Answers]:
    """Every variant's `samples` answers to every input, from the cache where it has them; API variants
    use the task's tools that `tools` (the benchmarked run's policy) opens.

    API variants answer concurrently with the local ones; the local variants of one run answer one
    after the other on its server (merged LoRA serving holds one checkpoint at a time), and one run's
    server is stopped before the next run's starts (the last stays up, so an embedded judge can reuse
    it if it serves adapters). A variant whose model cannot be reached gets no
    answers and its errors instead; the others are not held up.
    """
    results: dict[str, Answers] = {}

    async def local() -> None:
        by_run: dict[str, list[Variant]] = {}
        for variant in variants:
            if variant.run is not None:
                by_run.setdefault(variant.run.name, []).append(variant)
        previous: RunView | None = None
        for group in by_run.values():
            run = group[0].run
            if previous is not None:
                await previous.policy.aclose()
            work = [_VariantWork(v, texts, samples, rollout, store, calls, tools) for v in group]
            if any(w.missing for w in work):
                try:
                    await run.policy.start()
                except Exception as exc:  # the server did not start: all of this run's variants fail
                    for w in work:
                        w.fail_missing(describe(exc))
            for w in work:
                results[w.variant.label] = await w.run()
            previous = run

    async def remote() -> None:
        work = [_VariantWork(v, texts, samples, rollout, store, calls, tools) for v in variants if v.api is not None]
        for w, answers in zip(work, await asyncio.gather(*(w.run() for w in work)), strict=True):
            results[w.variant.label] = answers

    await asyncio.gather(local(), remote())
    return {v.label: results[v.label] for v in variants}


class _VariantWork:
    """Answers of one variant: cached ones loaded, missing ones asked for and cached as each input finishes."""

    def __init__(
        self,
        variant: Variant,
        texts: list[str],
        samples: int,
        rollout,
        store: ArtifactStore,
        calls: Counter,
        tools: Policy,
    ):
        self.variant, self.samples, self.rollout, self.store, self.calls = variant, samples, rollout, store, calls
        self.tools = tools
        self.keys = {text: answer_key(variant, text, samples, rollout, tools.task) for text in texts}
        self.answers = Answers()
        self.missing = []
        for text, key in self.keys.items():
            if store.exists(STAGE, key):
                lines = (store.path(STAGE, key) / FILE).read_text().splitlines()
                self.answers.by_input[text] = [Trajectory.model_validate_json(line) for line in lines]
            else:
                self.missing.append(text)

    def fail_missing(self, error: str) -> None:
        self.answers.errors += [error] * (len(self.missing) * self.samples)
        self.missing = []

    async def run(self) -> Answers:
        if self.missing:
            try:
                respond, close = await self._responder()
            except Exception as exc:
                self.fail_missing(describe(exc))
            else:
                try:
                    await self._ask(respond)
                finally:
                    await close()
        for trajectories in self.answers.by_input.values():
            for trajectory in trajectories:
                trajectory.metadata["variant"] = self.variant.label
        return self.answers

    async def _ask(self, respond: Callable[[str], Awaitable[Trajectory]]) -> None:
        def keep(group: TrajectoryGroup) -> TrajectoryGroup:
            text = group.metadata["input"]
            if group.trajectories:
                self.answers.by_input[text] = group.trajectories
            if group.exceptions:
                self.answers.errors += [describe(e) for e in group.raised] or group.exceptions
            else:  # only complete answer sets are cached; a failed request is asked again next time
                with self.store.write(STAGE, self.keys[text], {"variant": self.variant.identity}) as out:
                    (out / FILE).write_text("".join(t.model_dump_json() + "\n" for t in group.trajectories))
            return group

        groups = [
            TrajectoryGroup((respond(text) for _ in range(self.samples)), metadata={"input": text})
            for text in self.missing
        ]
        await gather_trajectory_groups(
            groups, pbar_desc=f"answers {self.variant.label}", max_exceptions=math.inf, after_each=keep
        )

    async def _responder(self) -> tuple[Callable[[str], Awaitable[Trajectory]], Callable[[], Awaitable[None]]]:
        """A function answering one input, and one releasing what it holds."""
        v, rollout = self.variant, self.rollout

        async def nothing() -> None:
            return None

        if v.run is not None:
            name = await v.run.policy.serve_step(v.step)
            config = v.run.config.model_copy(update={"rollout": rollout})
            return (lambda text: v.run.policy.answer(v.system_prompt, text, config, name)), nothing
        target = v.api.target()
        if target.api_base:  # an OpenAI-compatible server: the client the policy is asked with
            endpoint = Model(name=target.name, inference_base_url=target.api_base, inference_api_key=target.api_key)
            client = endpoint.openai_client()
            complete, close = openai_completion(client, target.name, rollout), client.close
        else:
            complete, close = litellm_completion(target, rollout), nothing

        async def respond(text: str) -> Trajectory:
            self.calls["policy"] += 1
            return await task_rollout(complete, v.system_prompt, text, self.tools.task, await self.tools.toolbox())

        return respond, close


def litellm_completion(target: LiteLLMTarget, rollout: RolloutConfig) -> Complete:
    """Completions of a provider-routed LiteLLM model (the key comes from the provider's usual environment
    variable, or the model's `api_key_env`); its turns join the conversation as plain assistant messages
    (an API model is not trained)."""

    async def complete(messages: list[dict], tools: list[dict] | None) -> Turn:
        response = await import_litellm().acompletion(
            **target.params(),
            messages=messages,
            max_tokens=rollout.max_tokens,
            temperature=rollout.temperature,
            drop_params=True,  # providers that reject a sampling setting get the request without it
            num_retries=2,
            **({"tools": tools} if tools else {}),
        )
        choice = response.choices[0]
        message: dict = {"role": "assistant", "content": choice.message.content or ""}
        if getattr(choice.message, "tool_calls", None):
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in choice.message.tool_calls
            ]
        usage = getattr(response, "usage", None)
        return Turn(message, choice.finish_reason, getattr(usage, "completion_tokens", 0) or 0)

    return complete
