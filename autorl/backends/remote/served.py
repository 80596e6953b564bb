"""The models `autorl serve` holds (`ServedModels`): a `ModelBackend`'s models as the HTTP app (app.py) serves them.

A model is registered on its first request, again after a restart from the registry
(`HOME/serve/models.json`), resuming from its newest checkpoint; one client at a time trains it (a `Lease`);
each step id is trained once (its record `STEP_IDS_FILE` beside the history). A request the server refuses is
a `Refused`: a status and one line, which the app answers as `{"error": "<line>"}`.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import re
import shutil
import tarfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel
from starlette.background import BackgroundTask

from ...atomic import atomic_text
from ...errors import ServerDiedError, quoted
from ...model import Model, TrainableModel
from ...serving.auth import bearer
from ...serving.embedded import resolve_base_model
from ...training.checkpoints import METRICS_FILE, checkpoint_name, complete_checkpoints, missing_checkpoint
from ...training.engines import check_target_modules
from ..base import inference_name
from ..cluster.proxy import HOP_BY_HOP
from ..model_backend import ModelBackend
from ..run_dir import append_history, read_history
from .limits import ServeLimits
from .wire import CLIENT_SET, LogRequest, Registered, RegisterRequest, Trained, TrainRequest, check_name

log = logging.getLogger("autorl")

REGISTRY_FILE = "models.json"
"""What the server serves (`RegisterRequest`s by name), under HOME/serve/: a restarted server resumes them."""
STEP_IDS_FILE = "remote_steps.jsonl"
"""In a model's run directory: `{"step_id", "step"}`, written before the step trains; with the history it
says whether a step id was trained."""
STEP = re.compile(r"\d{1,6}")


class Refused(Exception):
    """A request answered with `status` and the one line `message`."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Lease:
    """Which client trains a model: one at a time, until `lease_s` after its last step ends."""

    client: str
    running: int = 0
    """Its steps under way."""
    until: float = math.inf
    """`time.monotonic()` after which another client may take the model (inf while a step runs)."""


class ServedModels:
    """The models of a `ModelBackend` as the server serves them: registered on first use (again after a
    restart, from the registry), trained by one client at a time, each step id trained once."""

    def __init__(self, backend: ModelBackend, serve_dir: Path, lease_s: float, limits: ServeLimits | None = None):
        self.backend = backend
        self.registry_path = serve_dir / REGISTRY_FILE
        self.lease_s = lease_s
        self.limits = limits or ServeLimits()
        self._owned: dict[str, set[str]] = defaultdict(set)
        """The names each client (by its id) registered while the server runs."""
        self.models: dict[str, TrainableModel] = {}
        self._starting: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._stepping: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._leases: dict[str, Lease] = {}
        self._inflight: dict[tuple[str, str], asyncio.Task] = {}
        """The steps running, by model name and step id."""
        self._http: dict[str, httpx.AsyncClient] = {}

    def registry(self) -> dict[str, dict]:
        try:
            return json.loads(self.registry_path.read_text())
        except FileNotFoundError:
            return {}

    def check_limits(self, request: BaseModel) -> None:
        """400 when a knob of `request` is past the server's limits (`ServeLimits`)."""
        if (why := self.limits.check(request)) is not None:
            raise Refused(400, why)

    async def register(self, request: RegisterRequest, client: str = "") -> Registered:
        check_name(request.name)
        check_name(request.project, "project")
        self.check_limits(request)
        if set(request.server) & CLIENT_SET:
            field = sorted(set(request.server) & CLIENT_SET)[0]
            raise Refused(400, f"server.{field} is set by `autorl serve` for every model, not by a client")
        known = self.registry().get(request.name)
        if known and (known["project"], known["base_model"]) != (request.project, request.base_model):
            raise Refused(
                409,
                f"model {quoted(request.name)} is served here with project {known['project']!r} and base model "
                f"{known['base_model']!r}; register another name",
            )
        new = known is None and request.name not in self.models
        if new:
            self.check_room(request.name, client)
        try:
            model = await self._start(request)
        except BaseException:
            if new:  # a registration that failed holds no room of the client's
                self._owned[client].discard(request.name)
            raise
        return await self.registered(model)

    def check_room(self, name: str, client: str) -> None:
        """429 when the server holds `max_models` models, or `client` registered `max_models_per_client`; else
        `name` counts as the client's (`register` gives it back if the registration fails)."""
        held = set(self.models) | set(self.registry())
        if len(held) >= self.limits.max_models:
            raise Refused(
                429, f"this server holds {len(held)} models, its limit (autorl serve --max-models); use one of them"
            )
        if len(self._owned[client] - {name}) >= self.limits.max_models_per_client:
            raise Refused(
                429,
                f"this client registered {self.limits.max_models_per_client} models, the limit per client "
                "(autorl serve --max-models-per-client)",
            )
        self._owned[client].add(name)

    async def _start(self, request: RegisterRequest) -> TrainableModel:
        self._check_base_model(request)
        async with self._starting[request.name]:  # concurrent first requests start one vLLM server
            if request.name not in self.models:
                model_dir = await asyncio.to_thread(resolve_base_model, request.base_model)  # before vLLM starts
                await asyncio.to_thread(check_target_modules, model_dir, request.trainer.target_modules)
                model = TrainableModel(**request.model_dump())
                run_dir = self.backend.run_dir(model)
                existed = run_dir.exists()
                try:
                    await self.backend.register(model)
                except BaseException:
                    if not existed:  # a failed registration leaves no directory behind
                        shutil.rmtree(run_dir, ignore_errors=True)
                    raise
                self.models[request.name] = model
                registry = self.registry()
                if registry.get(request.name) != request.model_dump(mode="json"):
                    registry[request.name] = request.model_dump(mode="json")
                    atomic_text(self.registry_path, json.dumps(registry, indent=1))
                log.info("serving model %r (project %r, base %s)", model.name, model.project, model.base_model)
        return self.models[request.name]

    async def get(self, name: str) -> TrainableModel:
        """The registered model `name`; one the server served before a restart is registered again first."""
        if name in self.models:
            return self.models[name]
        return await self._start(self._entry(name))

    def recorded(self, name: str) -> TrainableModel:
        """The registered model `name` without starting it: what reads its files (checkpoints, history) needs. One
        the server served before a restart is its registry's entry, so no vLLM server starts to read a file."""
        if name in self.models:
            return self.models[name]
        entry = self._entry(name)
        self._check_base_model(entry)
        return TrainableModel(**entry.model_dump())

    def _check_base_model(self, request: RegisterRequest) -> None:
        """403 when the server's limits refuse `request`'s base model (a registration's, or a registry's entry)."""
        if (why := self.limits.check_base_model(request.base_model)) is not None:
            raise Refused(403, why)

    def _entry(self, name: str) -> RegisterRequest:
        """The registry's entry of model `name` (a 404 without one)."""
        known = self.registry().get(name)
        if known is None:
            raise Refused(
                404, f"model {quoted(name)} is not served here; register it with `await model.register(backend)`"
            )
        return RegisterRequest.model_validate(known)

    async def registered(self, model: TrainableModel) -> Registered:
        step = await self.backend.get_step(model)
        return Registered(step=step, inference_name=inference_name(model.name, step))

    def check_lease(self, name: str, client: str) -> None:
        """409 when another client trains `name` (a step of it runs, or ended less than `lease_s` ago)."""
        lease = self._leases.get(name)
        if lease is not None and lease.client != client and time.monotonic() < lease.until:
            wait = "a step of it is running" if lease.running else f"free in {lease.until - time.monotonic():.0f} s"
            raise Refused(
                409, f"model {name!r} is being trained by another client ({wait}); one client trains a model at a time"
            )

    async def train(self, name: str, request: TrainRequest, client: str) -> Trained:
        """One step, or the answer of the step `request.step_id` named before: its record once it was
        trained, the step under way while it runs. The step runs as a task of its own, so a client that
        disconnects does not stop it; its retry gets the result."""
        model = await self.get(name)
        self.check_lease(name, client)  # before the step in flight: its answer is the training client's only
        if (task := self._inflight.get((name, request.step_id))) is not None:
            return await asyncio.shield(task)
        lease = self._leases.get(name)
        if lease is None or lease.client != client:
            lease = self._leases[name] = Lease(client)
        lease.running += 1
        lease.until = math.inf
        task = asyncio.create_task(self._step(model, request))
        self._inflight[name, request.step_id] = task

        def done(_: asyncio.Task) -> None:
            self._inflight.pop((name, request.step_id), None)
            lease.running -= 1
            if not lease.running:
                lease.until = time.monotonic() + self.lease_s

        task.add_done_callback(done)
        return await asyncio.shield(task)

    async def _step(self, model: TrainableModel, request: TrainRequest) -> Trained:
        async with self._stepping[model.name]:  # the step number and its id's record, then the step
            run_dir = self.backend.run_dir(model)
            if (trained := await self.trained(model, request.step_id)) is not None:
                log.info(
                    "model %r: step id %s was trained already (step %d)",
                    model.name,
                    request.step_id,
                    trained.metrics["step"],
                )
                return trained
            step = await self.backend.get_step(model) + 1
            append_history(run_dir, {"step_id": request.step_id, "step": step}, STEP_IDS_FILE)
            if request.sft is not None:
                metrics = await self.backend.sft_step(model, request.trajectories, request.sft)
            else:
                metrics = await self.backend.train_step(model, request.groups, request.config)
            return Trained(metrics=metrics, inference_name=inference_name(model.name, metrics["step"]))

    async def trained(self, model: TrainableModel, step_id: str) -> Trained | None:
        """The record of the step `step_id` named, if that step was trained."""
        run_dir = self.backend.run_dir(model)
        steps = [r["step"] for r in read_history(run_dir, STEP_IDS_FILE) if r.get("step_id") == step_id]
        if not steps or await self.backend.get_step(model) < steps[-1]:
            return None
        record = next((r for r in read_history(run_dir) if r.get("step") == steps[-1]), None)
        return None if record is None else Trained(metrics=record, inference_name=inference_name(model.name, steps[-1]))

    def release(self, name: str, client: str) -> None:
        lease = self._leases.get(name)
        if lease is not None and lease.client == client and not lease.running:
            del self._leases[name]

    async def log(self, name: str, request: LogRequest, client: str = "") -> dict[str, float]:
        """Record an evaluation batch. A trainable model's only from the client that trains it, or while no client
        does (409, `check_lease`): its figures choose the checkpoint `delete_checkpoints(best)` keeps. A model
        that is not trainable (`Model`: a baseline, a hosted model) gets a run directory of its own, never one of
        a trainable model's, and a new one only while the server holds fewer than `max_models` models and
        directories."""
        if request.trainable:
            self.check_lease(name, client)
            model: Model = await self.get(name)
        else:
            if name in self.models or name in self.registry():
                raise Refused(409, f"model {quoted(name)} is trainable here: log it with trainable=true")
            model = Model(
                name=name, project=check_name(request.project, "project"), report_metrics=request.report_metrics
            )
            run_dir = self.backend.run_dir(model)
            root = run_dir.parent.parent  # HOME/models: a directory per project and model
            held = {p for p in root.glob("*/*") if p.is_dir()} | {
                root / e["project"] / n for n, e in self.registry().items()
            }
            if run_dir not in held and len(held) >= self.limits.max_models:
                raise Refused(429, f"this server holds {len(held)} models, its limit (autorl serve --max-models)")
        return await self.backend.log(model, request.groups, request.split, request.metrics, request.step)

    def merged(self, model: TrainableModel) -> bool:
        config = getattr(self.backend, "server_config", None)
        return config is not None and config.with_overrides(model.server).serves_merged()

    async def target(self, requested: str) -> tuple[TrainableModel, str]:
        """The model a chat request names, and the name its vLLM server serves that checkpoint under."""
        name, at, step_text = requested.partition("@")
        if name not in self.models and name not in self.registry():
            raise Refused(404, f"model {quoted(requested)} is not served here (GET /v1/models lists what is)")
        model = await self.get(name)
        if not at:
            return model, model.get_inference_name()
        if not STEP.fullmatch(step_text):
            raise Refused(400, f"model {quoted(requested)}: expected NAME@NNNN, a checkpoint's step")
        return model, await self.serve(model, int(step_text))

    async def serve(self, model: TrainableModel, step: int) -> str:
        """The name the model's vLLM server serves checkpoint `step` under. Merged serving holds one
        checkpoint, the newest: another step would swap the weights under the training client's rollouts."""
        if self.merged(model):
            newest = await self.backend.get_step(model)
            if step != newest:
                raise Refused(
                    400,
                    f"{inference_name(model.name, step)}: this server serves {model.name!r} merged into the weights, "
                    f"one checkpoint at a time (the newest, {inference_name(model.name, newest)}); "
                    "start `autorl serve --lora-serving adapter` to request earlier checkpoints",
                )
            return model.get_inference_name()
        return await self.backend.serve_checkpoint(model, step)

    def servable(self, model: TrainableModel) -> list[str]:
        """The names `/v1/models` lists for `model`: the newest, and each checkpoint it may be asked for."""
        run_dir = self.backend.run_dir(model)
        steps = [0, *(step for step, _ in complete_checkpoints(run_dir / "checkpoints"))]
        if self.merged(model):
            steps = steps[-1:]
        return [model.name, *(inference_name(model.name, step) for step in steps)]

    async def forward(self, request: Request, route: str, body: dict) -> Response:
        """Pass an OpenAI request to `route` (one of `INFERENCE_ROUTES`) on the vLLM server of the model it
        names, streamed back as it comes; what it asks of the model past `limits` is a 400 (`ServeLimits.check_ask`),
        sent nowhere."""
        if not isinstance(body.get("model"), str):
            raise Refused(400, f'{route} needs a JSON object with a "model" name')
        if (why := self.limits.check_ask(body)) is not None:
            raise Refused(400, why)
        model, served = await self.target(body["model"])
        client = self._http.get(model.name)
        if client is None:  # held back while the model trains; resent once a dead vLLM server was restarted
            client = self._http[model.name] = httpx.AsyncClient(
                transport=self.backend.transport(model), timeout=httpx.Timeout(None, connect=10)
            )
        headers = {"Content-Type": "application/json", **bearer(model.inference_api_key or "")}
        outgoing = client.build_request(
            request.method,
            model.require_endpoint().removesuffix("/v1") + route,
            headers=headers,
            content=json.dumps({**body, "model": served}),
        )
        try:
            response = await client.send(outgoing, stream=True)
        except ServerDiedError:
            raise
        except httpx.HTTPError as exc:
            raise Refused(502, f"the vLLM server of {model.name!r} did not answer ({type(exc).__name__})") from None
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers={k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP},
            background=BackgroundTask(response.aclose),
        )

    async def close(self) -> None:
        for client in self._http.values():
            await client.aclose()
        self._http.clear()


def checkpoint_archive(checkpoints: Path, name: str, step: int) -> bytes:
    """Checkpoint `step`'s files (the PEFT adapter and its metrics) as a .tar.gz."""
    path = checkpoints / checkpoint_name(step)
    if not (path / METRICS_FILE).is_file():
        raise missing_checkpoint(name, step, checkpoints)
    return files_archive(path, sorted(path.rglob("*")))


def trajectories_archive(run_dir: Path) -> bytes:
    """What `Model.log` recorded of a model (`trajectories/<split>/NNNN.parquet`, ART's files) as a .tar.gz of
    `<split>/NNNN.parquet` members; an empty archive when it recorded none."""
    root = run_dir / "trajectories"
    return files_archive(root, sorted(root.glob("*/[0-9][0-9][0-9][0-9].parquet")))


def files_archive(root: Path, files: list[Path]) -> bytes:
    """The regular files among `files` (all under `root`) as a .tar.gz, named relative to `root`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        for file in files:
            if file.is_file() and not file.is_symlink():
                archive.add(file, arcname=str(file.relative_to(root)), recursive=False)
    return buffer.getvalue()
