"""`RemoteBackend`: models served and trained by `autorl serve` on another machine, reached over HTTP.

ART's split: the user's program (the client, any machine with Python) makes its rollouts through the
server's OpenAI-compatible `/v1` and sends trajectory groups to train; the server (`autorl serve`, server.py
beside this module, on the GPU machine) runs a `LocalBackend` (vLLM and the trainer). An ART program
switches by changing its backend line only: `RemoteBackend("http://gpu-box:7999", api_key=...)` for `LocalBackend()` (ART's name for it,
`ServerlessBackend(api_key=..., base_url=...)`, is this class too).

What goes over the wire (request and answer models, headers, name checks) is wire.py's, which the server
imports too, so it answers exactly what this client sends.

Faults (connection.py): a request that cannot reach the server, or that it answers 5xx, is sent again with
exponential backoff (a server restarting resumes its models from their newest checkpoints), then ends in one
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
import functools
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ...atomic import atomic_text
from ...capture.rollouts import ROLLOUT_ID, FinishedRollout, GatewayRollout, OpenedRollout
from ...errors import AutoRLError
from ...threads import in_time
from ...training.checkpoints import checkpoint_name, complete_checkpoints, remove_checkpoint
from ..base import TrainingCalls
from ..run_dir import HISTORY_FILE, ensure_writable
from ..transport import GatedTransport, InferenceGate
from .answers import printable
from .connection import MAX_DOWNLOAD_BYTES, Connection
from .wire import (
    CLIENT_SET,
    Deleted,
    DeleteRequest,
    Figures,
    History,
    LogRequest,
    Registered,
    RegisterRequest,
    ServeRequest,
    StepAnswer,
    Steps,
    Trained,
    TrainRequest,
    built,
    check_name,
)

if TYPE_CHECKING:
    from ...config import TrainConfig
    from ...model import Model, TrainableModel
    from ...trajectories import Trajectory, TrajectoryGroup
    from ...types import TrainSFTConfig


class RemoteBackend(Connection, TrainingCalls):
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
        super().__init__(url or base_url, api_key, client_id, retries, backoff_s, max_download_bytes)
        self.mirror = None if mirror is None else Path(mirror)
        self.server = dict(server or {})
        if set(self.server) & CLIENT_SET:
            raise AutoRLError(
                f"RemoteBackend server= may not set {sorted(set(self.server) & CLIENT_SET)}: the server does"
            )
        self._stepping: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._gate = InferenceGate()  # never closed here: the server holds requests back while it trains
        self._trained: set[str] = set()

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

    def check_can_start(self, model: TrainableModel) -> None:
        self.check_reachable()

    def serves_adapters(self) -> bool:
        return True  # an `autorl serve` is asked for adapter serving (`make_backend`)

    def starts_embedded_apart(self) -> bool:
        return True  # the policy's server is not on this machine

    def shares_cpu_with_embedded(self) -> bool:
        return False

    async def register(self, model: TrainableModel) -> None:
        """Serve `model` on the server (its newest checkpoint there, if it has one); its OpenAI clients then
        reach the server's `/v1` with the token."""
        request = built(
            RegisterRequest,
            f"RemoteBackend register of {model.name!r}",
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
            request = built(
                TrainRequest, f"RemoteBackend step of {model.name!r}", **fields, step_id=f"{self.client_id}-{step}"
            )
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
        request = built(ServeRequest, f"RemoteBackend serve_checkpoint of {model.name!r}", step=step)
        return (await self.answer(Registered, "POST", f"/models/{model.name}/serve", request)).inference_name

    async def log(
        self, model: Model, groups: list[TrajectoryGroup], split: str, metrics: dict[str, float], step: int | None
    ) -> dict[str, float]:
        from ...model import TrainableModel

        request = built(
            LogRequest,
            f"RemoteBackend log of {model.name!r}",
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
        request = built(
            DeleteRequest,
            f"RemoteBackend delete_checkpoints of {model.name!r}",
            best_checkpoint_metric=best_checkpoint_metric,
            keep=keep,
        )
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
        return await self.download(f"/models/{model.name}/checkpoints/{step}", Path(path) / checkpoint_name(step))

    async def download_trajectories(self, model: TrainableModel, path: str | os.PathLike) -> Path:
        """Fetch what `model.log` recorded of the model on the server (`<split>/NNNN.parquet`, ART's files) into the
        directory `path`, which it replaces whole; returns it."""
        return await self.download(f"/models/{model.name}/trajectories", Path(path))

    async def capture_rollout(self, model: TrainableModel) -> GatewayRollout:
        """A rollout address on the server's capture gateway (`autorl.backends.remote.rollouts`): an agent in
        any language given its `env()` (`OPENAI_BASE_URL`, `OPENAI_API_KEY`: the server's token) has its chat
        completions passed on to `model` and recorded; `finish_rollout` fetches them. The server's path for it must
        be `/models/NAME/rollouts/ID/v1`, NAME this model's and ID a rollout id: it becomes the agent's base URL,
        sent its token, so a path such as `@evil.example/v1` (another host) is one `AutoRLError` line."""
        opened = await self.answer(OpenedRollout, "POST", f"/models/{model.name}/rollouts", idempotent=False)
        expected = f"/models/{model.name}/rollouts/{opened.id}/v1"
        if not ROLLOUT_ID.fullmatch(opened.id) or not opened.id.strip(".") or opened.path != expected:
            raise AutoRLError(
                f"autorl server {self.url}: the rollout it opened is at {printable(opened.path, 80)!r}, not "
                f"/models/{model.name}/rollouts/ID/v1 (ID {printable(opened.id, 80)!r}); is it an autorl server?"
            )
        return GatewayRollout(opened.id, f"{self.url}{expected}", self.api_key)

    async def finish_rollout(self, model: TrainableModel, rollout_id: str) -> Trajectory:
        """The trajectory the server recorded for rollout `rollout_id` (its calls, the reward the agent posted);
        the rollout ends there."""
        path = f"/models/{model.name}/rollouts/{rollout_id}/finish"
        return (await self.answer(FinishedRollout, "POST", path, idempotent=False)).trajectory

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
        """Whether the server answers its health check again (`Connection.wait_for_health`)."""
        return await self.wait_for_health()

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
            release = functools.partial(
                httpx.post, f"{self.url}/models/{name}/release", headers=self.headers, timeout=self.probe_deadline_s
            )
            with contextlib.suppress(httpx.HTTPError, TimeoutError):  # else the server frees it when its lease ends
                in_time(release, self.probe_deadline_s)
        self._trained.clear()

    async def __aenter__(self) -> RemoteBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


ServerlessBackend = RemoteBackend
"""ART's name for its client of a remote training service (`art.ServerlessBackend(api_key=..., base_url=...)`):
here a client of `autorl serve`."""
