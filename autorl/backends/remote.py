"""`RemoteBackend`: models served and trained by `autorl serve` on another machine, reached over HTTP.

ART's split: the user's program (the client, any machine with Python) makes its rollouts through the
server's OpenAI-compatible `/v1` and sends trajectory groups to train; the server (`pipelines.server`, on the
GPU machine) runs a `LocalBackend` (vLLM and the trainer). An ART program switches by changing its backend
line only: `RemoteBackend("http://gpu-box:7999", api_key=...)` for `LocalBackend()` (ART's name for it,
`ServerlessBackend(api_key=..., base_url=...)`, is this class too).

The wire format lives here, beside the client, so the server (which imports autorl, never the reverse)
answers exactly what the client sends: JSON bodies of the request models below, answers as JSON, errors
as `{"error": "<one line>"}` with a 4xx status. Every path but /health needs the server's token
(`Authorization: Bearer ...`, as OpenAI clients send their key).

Faults: a request that cannot reach the server, or that it answers 5xx, is sent again with exponential
backoff (a server restarting resumes its models from their newest checkpoints), then ends in one
`AutoRLError` line naming the URL. A training step carries an id chosen here (`TrainRequest.step_id`: this
client's id and the step it asks for), so a step whose answer was lost (a cut connection, a server killed
after the step, this client killed and started again with its id) is answered from the server's record when
sent again instead of being trained twice.

With a `mirror` directory (what `autorl run --backend URL` gives it), each model's run directory is copied to
this machine as the server's changes it: the history and every complete checkpoint, at registration and
after each step and deletion, so the run's stages read the same files as with a `LocalBackend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import os
import re
import tarfile
import tempfile
import uuid
from collections import defaultdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from ..atomic import atomic_dir, atomic_text
from ..config import TrainConfig, TrainerConfig
from ..errors import AutoRLError, quoted
from ..serving.auth import bearer
from ..serving.config import LOOPBACK_HOSTS
from ..training.checkpoints import checkpoint_name, complete_checkpoints, remove_checkpoint
from ..trajectories import Trajectory, TrajectoryGroup
from ..types import TrainSFTConfig
from .base import TrainingCalls
from .run_dir import HISTORY_FILE, ensure_writable
from .transport import GatedTransport, InferenceGate

if TYPE_CHECKING:
    from ..model import Model, TrainableModel

log = logging.getLogger("autorl")

DEFAULT_PORT = 7999
"""`autorl serve`'s port unless told otherwise (ART's server's)."""
URL_ENV = "AUTORL_URL"
"""The server's URL when `RemoteBackend` is given none."""
TOKEN_ENV = "AUTORL_TOKEN"
"""The server's token: what `autorl serve` accepts, and what `RemoteBackend` sends when given no `api_key`."""
CLIENT_HEADER = "X-AutoRL-Client"
"""The id of one `RemoteBackend` (random, per instance): a model is trained by one client at a time."""
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
"""A model's or project's name on a server: a directory name (no '/', no leading '.', no '@')."""
GZIP_OVER_BYTES = 64 * 1024
"""Request bodies larger than this are sent gzip-compressed (trajectories' JSON, logprobs included, compresses well)."""
REQUEST_TIMEOUT = httpx.Timeout(3600, connect=10)
"""A training step on a CPU, or one waiting for the server to start the model's vLLM, takes minutes."""
MAX_DOWNLOAD_BYTES = 4 * 2**30
"""The largest checkpoint `download_checkpoint` takes (as sent, and unpacked): a LoRA's adapter is megabytes."""
A = TypeVar("A", bound=BaseModel)
CLIENT_SET = frozenset({"host", "port", "extra_args"})
"""`ServerConfig` fields a client may not set for its model (`RegisterRequest.server`): the vLLM servers stay on
loopback behind `autorl serve`, on ports it picks, with the flags it was started with."""


class RegisterRequest(BaseModel):
    """`POST /models`: serve a model (its newest checkpoint, if it has one)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    project: str = "default"
    base_model: str
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    server: dict[str, Any] = Field(default_factory=dict)
    report_metrics: list[str] | None = None


class Registered(BaseModel):
    """The answer to `POST /models` and `POST /models/NAME/serve`."""

    step: int
    inference_name: str
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


class StepAnswer(BaseModel):
    """The answer to `GET /models/NAME/step`."""

    step: int = Field(ge=0)


class Steps(BaseModel):
    """The answer to `GET /models/NAME/checkpoints`."""

    steps: list[int]


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
    inference_name: str


class LogRequest(BaseModel):
    """`POST /models/NAME/log`: an evaluation batch (`Model.log`)."""

    model_config = ConfigDict(extra="forbid")

    project: str = "default"
    trainable: bool = True
    report_metrics: list[str] | None = None
    groups: list[TrajectoryGroup] = Field(default_factory=list)
    split: str = Field("val", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    metrics: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = Field(default_factory=dict)
    """Finite figures only: one of them may choose the best checkpoint (`delete_checkpoints(best)`)."""
    step: int | None = Field(None, ge=0)


class DeleteRequest(BaseModel):
    """`POST /models/NAME/delete_checkpoints`."""

    model_config = ConfigDict(extra="forbid")

    best_checkpoint_metric: str = "val/reward"
    keep: str = "latest,best"


class ServeRequest(BaseModel):
    """`POST /models/NAME/serve`: serve checkpoint `step` (`Backend.serve_checkpoint`)."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0)


def check_name(name: str, what: str = "model name") -> str:
    """`name` if a server takes it (`NAME`), else one `AutoRLError` line."""
    if not NAME.fullmatch(name):
        raise AutoRLError(
            f"{what} {quoted(name)}: use letters, digits, '.', '_' and '-' (no '/', no leading '.', no '@')"
        )
    return name


def error_line(response: httpx.Response) -> str:
    """What a server's error answer says, in one line."""
    try:
        text = str(response.json().get("error") or response.json())
    except (ValueError, AttributeError):
        text = response.text
    return " ".join(text.split())[:500] or response.reason_phrase


class RemoteBackend(TrainingCalls):
    """A `Backend` whose models are served and trained by `autorl serve` at `url`.

    url: the server's address (`http://host:7999`); None: `base_url`, else the `AUTORL_URL` variable.
    api_key: the server's token; None: the `AUTORL_TOKEN` variable. Sent with every request (and as the
        API key of the models' OpenAI clients), never logged.
    base_url: ART's keyword for `url` (`ServerlessBackend(api_key=..., base_url=...)`).
    retries: times a request that could not reach the server (or got a 5xx) is sent again, waiting
        `backoff_s`, then twice as long each time (6 tries after the first: about 30 s in all, long enough
        for a server to restart).
    mirror: a directory of this machine that each model's run directory is copied into
        (`mirror/<project>/<name>/`: `history.jsonl` and the complete `checkpoints/NNNN/`), kept as the server's
        after registration, each step and each deletion; None: nothing is copied.
    server: `ServerConfig` fields every model registered here asks of the server (under the model's own
        `TrainableModel.server`); not `host`, `port` nor `extra_args`, which the server sets.
    client_id: who trains (`CLIENT_HEADER`: the server lets one client at a time train a model); None: a
        random one. `autorl run` gives one per home, so a rerun after a kill trains on without waiting for the
        killed run's lease to end.
    max_download_bytes: the largest checkpoint it downloads, as sent and unpacked (`MAX_DOWNLOAD_BYTES`).
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        retries: int = 6,
        backoff_s: float = 0.5,
        mirror: str | os.PathLike | None = None,
        server: dict[str, Any] | None = None,
        client_id: str | None = None,
        max_download_bytes: int = MAX_DOWNLOAD_BYTES,
    ):
        url = url or base_url or os.environ.get(URL_ENV)
        if not url:
            raise AutoRLError(
                f"RemoteBackend needs the server's URL: pass url= (http://host:{DEFAULT_PORT}) or set {URL_ENV}"
            )
        if not url.startswith(("http://", "https://")):
            raise AutoRLError(f"RemoteBackend url {url!r}: expected http://host:port or https://host")
        self.url = url.rstrip("/").removesuffix("/v1")
        if self.url.startswith("http://") and urlsplit(self.url).hostname not in LOOPBACK_HOSTS:
            log.warning(
                "RemoteBackend %s: plain HTTP to another machine sends the token and every trajectory in clear; "
                "use https:// (autorl serve --ssl-certfile/--ssl-keyfile, or a TLS proxy)",
                self.url,
            )
        api_key = api_key if api_key is not None else os.environ.get(TOKEN_ENV)
        if not api_key:
            raise AutoRLError(
                f"RemoteBackend needs the server's token: pass api_key= or set {TOKEN_ENV} "
                "(`autorl serve` wrote it to HOME/serve/token unless given one)"
            )
        self.api_key = api_key
        self.retries = retries
        self.max_download_bytes = max_download_bytes
        self.backoff_s = backoff_s
        self.mirror = None if mirror is None else Path(mirror)
        self.server = dict(server or {})
        if set(self.server) & CLIENT_SET:
            raise AutoRLError(
                f"RemoteBackend server= may not set {sorted(set(self.server) & CLIENT_SET)}: the server does"
            )
        self.client_id = client_id or uuid.uuid4().hex
        """This client's id (`CLIENT_HEADER`): the server lets one client at a time train a model."""
        if not re.fullmatch(r"[A-Za-z0-9_]{8,48}", self.client_id):
            raise AutoRLError("RemoteBackend client_id: 8-48 letters, digits or '_'")
        self._stepping: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._gate = InferenceGate()  # never closed here: the server holds requests back while it trains
        self._trained: set[str] = set()
        self.bytes_sent = 0
        """Request body bytes sent (after compression), for measurements."""

    remote_server_starts = 0
    """vLLM servers this backend started elsewhere: none (the server starts its own; this client does not count
    them)."""

    def __repr__(self) -> str:
        return f"RemoteBackend({self.url!r})"  # never the key

    def run_dir(self, model: Model) -> Path:
        """The copy of the model's run directory on this machine (`mirror/<project>/<name>/`)."""
        if self.mirror is None:
            raise AutoRLError("this RemoteBackend keeps no copy of its models' run directories: give it mirror=DIR")
        return self.mirror / model.project / model.name

    @property
    def headers(self) -> dict[str, str]:
        return {**bearer(self.api_key), CLIENT_HEADER: self.client_id}

    async def request(self, method: str, path: str, body: BaseModel | None = None, *, idempotent: bool = True) -> Any:
        """Send a request to the server and return its JSON answer. A connection that fails, or a 5xx, is tried
        again with backoff (`idempotent=False`: only a connection that was never made, so nothing is recorded
        twice); then, like a 4xx, it is one `AutoRLError` line naming the URL."""
        headers = dict(self.headers)
        content = None
        if body is not None:
            content = body.model_dump_json().encode()
            headers["Content-Type"] = "application/json"
            if len(content) > GZIP_OVER_BYTES:
                content = gzip.compress(content, compresslevel=1)
                headers["Content-Encoding"] = "gzip"
        response = await self._send(method, path, content, headers, idempotent)
        try:
            return response.json()
        except ValueError:
            raise AutoRLError(
                f"autorl server {self.url}{path}: the answer is not JSON; is {self.url} an autorl server?"
            ) from None

    async def answer(self, kind: type[A], method: str, path: str, body: BaseModel | None = None, **kwargs: Any) -> A:
        """`request`'s answer read as a `kind`; one `AutoRLError` line when the server's JSON is not one."""
        data = await self.request(method, path, body, **kwargs)
        try:
            return kind.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the answer"
            raise AutoRLError(
                f"autorl server {self.url}{path}: unexpected answer ({where}: {first['msg']}); "
                "are this client and the server the same autorl version?"
            ) from None

    async def _send(
        self, method: str, path: str, content: bytes | None, headers: dict[str, str], idempotent: bool
    ) -> httpx.Response:
        where = f"{self.url}{path}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                wait = self.backoff_s * 2 ** (attempt - 1)
                log.warning(
                    "autorl server %s: %s; trying again in %.1f s (%d of %d)", where, last, wait, attempt, self.retries
                )
                await asyncio.sleep(wait)
            try:
                async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:  # per call: any event loop may call
                    response = await client.request(method, where, content=content, headers=headers)
                    self.bytes_sent += len(content or b"")
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if idempotent or isinstance(exc, httpx.ConnectError):
                    continue
                break
            if response.status_code < 400:
                return response
            if response.status_code >= 500 and (idempotent or response.status_code == 503):
                last = f"HTTP {response.status_code}: {error_line(response)}"
                continue
            raise AutoRLError(f"autorl server {where}: {error_line(response)} (HTTP {response.status_code})")
        raise AutoRLError(f"autorl server {where} failed after {attempt + 1} tries ({last})")

    def check_can_start(self, model: TrainableModel) -> None:
        self.check_reachable()

    def serves_adapters(self) -> bool:
        return True  # an `autorl serve` is asked for adapter serving (`make_backend`)

    def starts_embedded_apart(self) -> bool:
        return True  # the policy's server is not on this machine

    def shares_cpu_with_embedded(self) -> bool:
        return False

    def check_reachable(self) -> None:
        """One `AutoRLError` line, at once, when the server does not answer or refuses the token (no retries:
        for a check before anything expensive starts)."""
        try:
            response = httpx.get(f"{self.url}/v1/models", headers=self.headers, timeout=10)
        except httpx.TransportError as exc:
            raise AutoRLError(
                f"autorl server {self.url} does not answer ({type(exc).__name__}): is `autorl serve` running there?"
            ) from None
        if response.status_code == 401:
            raise AutoRLError(f"autorl server {self.url} refused the token: set {TOKEN_ENV} to the server's")
        if response.status_code >= 400:
            raise AutoRLError(f"autorl server {self.url}: {error_line(response)} (HTTP {response.status_code})")

    async def register(self, model: TrainableModel) -> None:
        """Serve `model` on the server (its newest checkpoint there, if it has one); its OpenAI clients then
        reach the server's `/v1` with the token."""
        request = RegisterRequest(
            name=check_name(model.name),
            project=check_name(model.project, "project"),
            base_model=model.base_model,
            trainer=model.trainer,
            server={**self.server, **model.server},
            report_metrics=model.report_metrics,
        )
        answer = await self.answer(Registered, "POST", "/models", request)
        model.inference_base_url = f"{self.url}/v1"
        model.inference_api_key = self.api_key
        model.inference_model_name = answer.inference_name
        await self._copy_back(model)

    async def train_step(self, model: TrainableModel, groups: list[TrajectoryGroup], config: TrainConfig) -> dict:
        """One GRPO step on the server (ART's `backend.train` keywords are mapped here, in the client, and sent
        as the `TrainConfig` they make); sent again (same step id) until the server answers it, so a step is
        trained once however often the connection fails. The id names this client and the step it asks for
        (the one after the server's newest when this client last heard): a client of the same id started again
        (`autorl run` after a kill) that asks for a step the killed one asked for gets that step's result, the
        step under way included, instead of a step more."""
        return await self._step(model, groups=groups, config=config)

    async def sft_step(self, model: TrainableModel, trajectories: list[Trajectory], config: TrainSFTConfig) -> dict:
        """One supervised step on the server, over the training route with its step id (as `train_step`)."""
        return await self._step(model, trajectories=trajectories, sft=config)

    async def _step(self, model: TrainableModel, **fields: Any) -> dict:
        """A step of `model` on the server: a `TrainRequest` of `fields` under this client's id for it."""
        async with self._stepping[model.name]:  # one step of a model at a time from here: each its own id
            step = await self.get_step(model) + 1
            request = TrainRequest(**fields, step_id=f"{self.client_id}-{step}")
            answer = await self.answer(Trained, "POST", f"/models/{model.name}/train", request)
            self._trained.add(model.name)
            model.inference_model_name = answer.inference_name
            await self._copy_back(model)
            return answer.metrics

    async def get_step(self, model: TrainableModel) -> int:
        return (await self.answer(StepAnswer, "GET", f"/models/{model.name}/step")).step

    def checkpoint_path(self, model: TrainableModel, step: int) -> str | None:
        """The mirror's copy of checkpoint `step` (None without `mirror=`: the checkpoint is on the server only;
        `download_checkpoint` fetches it)."""
        return None if self.mirror is None else super().checkpoint_path(model, step)

    async def serve_checkpoint(self, model: TrainableModel, step: int) -> str:
        """The name to request checkpoint `step` under (0: the base model). With merged serving (the server's
        default on CPU) only the newest checkpoint is servable: another step is one error line."""
        return (
            await self.answer(Registered, "POST", f"/models/{model.name}/serve", ServeRequest(step=step))
        ).inference_name

    async def log(
        self, model: Model, groups: list[TrajectoryGroup], split: str, metrics: dict[str, float], step: int | None
    ) -> dict[str, float]:
        from ..model import TrainableModel

        request = LogRequest(
            project=check_name(model.project, "project"),
            trainable=isinstance(model, TrainableModel),
            report_metrics=model.report_metrics,
            groups=groups,
            split=split,
            metrics=metrics,
            step=step,
        )
        path = f"/models/{check_name(model.name)}/log"
        return (await self.answer(Figures, "POST", path, request, idempotent=False)).root

    async def delete_checkpoints(self, model: TrainableModel, best_checkpoint_metric: str, keep: str) -> list[int]:
        request = DeleteRequest(best_checkpoint_metric=best_checkpoint_metric, keep=keep)
        deleted = (await self.answer(Deleted, "POST", f"/models/{model.name}/delete_checkpoints", request)).deleted
        await self._copy_back(model)
        return deleted

    async def list_checkpoints(self, model: TrainableModel) -> list[int]:
        """The steps of the model's complete checkpoints on the server, oldest first."""
        return (await self.answer(Steps, "GET", f"/models/{model.name}/checkpoints")).steps

    async def download_checkpoint(
        self, model: TrainableModel, step: int | None = None, path: str | os.PathLike = "."
    ) -> Path:
        """Fetch checkpoint `step` (None: the newest) from the server: its PEFT files go to `path/NNNN/`,
        which is returned (load it with `peft.PeftModel.from_pretrained(base, that_path)`)."""
        if step is None:
            step = await self.get_step(model)
        if step < 1:
            raise AutoRLError(f"model {model.name!r} has no checkpoint on {self.url} yet (it is at step 0)")
        where = f"{self.url}/models/{model.name}/checkpoints/{step}"
        target = Path(path) / checkpoint_name(step)
        with tempfile.TemporaryFile() as spool:
            await self._download(where, spool)
            spool.seek(0)
            with atomic_dir(target) as filling, tarfile.open(fileobj=spool, mode="r:gz") as archive:
                if sum(member.size for member in archive.getmembers()) > self.max_download_bytes:
                    raise AutoRLError(f"{where}: the checkpoint unpacks past {self.max_download_bytes} bytes")
                archive.extractall(filling, filter="data")  # no paths outside it, no links out, no devices
        return target

    async def _download(self, where: str, spool: IO[bytes]) -> None:
        """Stream `where` into `spool`, at most `max_download_bytes` (a connection that fails is tried again)."""
        for attempt in range(self.retries + 1):
            spool.seek(0)
            spool.truncate()
            try:
                async with (
                    httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client,
                    client.stream("GET", where, headers=self.headers) as response,
                ):
                    if response.status_code >= 400:
                        await response.aread()
                        raise AutoRLError(
                            f"autorl server {where}: {error_line(response)} (HTTP {response.status_code})"
                        )
                    async for chunk in response.aiter_bytes():
                        if spool.tell() + len(chunk) > self.max_download_bytes:
                            raise AutoRLError(f"{where}: the checkpoint is over {self.max_download_bytes} bytes")
                        spool.write(chunk)
                    return
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise AutoRLError(f"autorl server {where} does not answer ({type(exc).__name__})") from None
                await asyncio.sleep(self.backoff_s * 2**attempt)

    async def _copy_back(self, model: TrainableModel) -> None:
        """Make the mirror's copy of the model's run directory the server's: its history, and its complete
        checkpoints (the missing ones downloaded, each whole or not at all; those the server deleted removed)."""
        if self.mirror is None:
            return
        run_dir = self.run_dir(model)
        ensure_writable(run_dir)
        history = (await self.answer(History, "GET", f"/models/{model.name}/history")).history
        atomic_text(run_dir / HISTORY_FILE, "".join(json.dumps(record) + "\n" for record in history))
        checkpoints = run_dir / "checkpoints"
        here = {step for step, _ in complete_checkpoints(checkpoints)}
        there = set(await self.list_checkpoints(model))
        for step in sorted(there - here):
            await self.download_checkpoint(model, step, checkpoints)
        for step in sorted(here - there):
            remove_checkpoint(checkpoints, step)

    async def recover(self, model: TrainableModel) -> bool:
        """Wait for the server to answer its health check again (it restarts, or its network came back),
        with the requests' backoff; whether it does."""
        for attempt in range(self.retries + 1):
            try:
                async with httpx.AsyncClient(timeout=httpx.Timeout(10)) as client:
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return True
            except httpx.TransportError:
                pass
            await asyncio.sleep(self.backoff_s * 2**attempt)
        return False

    def transport(self, model: TrainableModel) -> httpx.AsyncBaseTransport:
        """Plain HTTP to the server's `/v1`; a request cut off or refused (the server restarting) is sent again
        once the server answers its health check."""

        async def recover() -> bool:
            return await self.recover(model)

        return GatedTransport(self._gate, recover)

    def close(self) -> None:
        """Let other clients train the models this one trained (the server frees them by itself after a while
        too). Nothing on the server stops."""
        for name in sorted(self._trained):
            with contextlib.suppress(httpx.HTTPError):  # else the server frees the model when its lease ends
                httpx.post(f"{self.url}/models/{name}/release", headers=self.headers, timeout=10)
        self._trained.clear()

    async def __aenter__(self) -> RemoteBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


ServerlessBackend = RemoteBackend
"""ART's name for its client of a remote training service (`art.ServerlessBackend(api_key=..., base_url=...)`):
here a client of `autorl serve`."""
