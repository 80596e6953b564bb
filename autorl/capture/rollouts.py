"""What every capture gateway shares, the standalone one (gateway.py: `CaptureGateway`, `autorl capture`) and the
per-model routes of `autorl serve` (`autorl.backends.remote.rollouts`): the open rollouts it records into, by id
(`Rollouts`); an answer relayed to the agent as it arrives and recorded once complete (`recording`); and what
goes over the wire (`Reward`, `OpenedRollout`, `FinishedRollout`, `GatewayRollout`). What an agent may ask of the
model is bounded as every chat request to a served model is (`ServeLimits.check_ask`).
"""

from __future__ import annotations

import re
import secrets
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..trajectories import Trajectory
from .completions import recorded_choice

ROLLOUT_HEADER = "X-Autorl-Rollout"
"""The header that names a rollout on `/v1/chat/completions` (for an agent whose base URL cannot change)."""
ROLLOUT_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""What a rollout id may be: the gateway's own are random hex; `autorl capture` takes an agent's own name too."""
MAX_OPEN_ROLLOUTS = 4096
"""Rollouts a gateway records into at once; opening one more drops the oldest not finished."""


@dataclass(frozen=True)
class GatewayRollout:
    """One rollout's address on a gateway: what an agent needs to have its calls recorded."""

    id: str
    base_url: str
    """The agent's OpenAI base URL (`.../rollouts/<id>/v1`)."""
    api_key: str
    """The gateway's key, the agent's OpenAI API key (held in memory, never written)."""

    def env(self) -> dict[str, str]:
        """The environment an OpenAI SDK reads (`OPENAI_BASE_URL`, `OPENAI_API_KEY`): give it to the agent's
        process."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.api_key}


class Reward(BaseModel):
    """What `POST .../rollouts/<id>/reward` takes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    reward: float
    metrics: dict[str, float] = Field(default_factory=dict)

    def apply(self, trajectory: Trajectory) -> float:
        """Sets this reward and these metrics on `trajectory`; the reward."""
        trajectory.reward = self.reward
        trajectory.metrics.update(self.metrics)
        return self.reward


class OpenedRollout(BaseModel):
    """`autorl serve`'s answer to `POST /models/NAME/rollouts`."""

    id: str
    path: str
    """The rollout's OpenAI base path on the server (`/models/NAME/rollouts/<id>/v1`): the agent's base URL is the
    server's URL followed by it."""


class FinishedRollout(BaseModel):
    """`autorl serve`'s answer to `POST /models/NAME/rollouts/<id>/finish`: what the rollout recorded."""

    trajectory: Trajectory


@dataclass
class Open:
    """An open rollout: its trajectory, and the model it belongs to (on `autorl serve`; "" on a gateway of one)."""

    trajectory: Trajectory
    model: str = ""


class Rollouts:
    """The rollouts a gateway records into, by id: at most `max_open` at once (the oldest dropped past it)."""

    def __init__(self, max_open: int = MAX_OPEN_ROLLOUTS):
        self.max_open = max_open
        self._open: dict[str, Open] = {}

    def open(self, rollout_id: str | None = None, model: str = "") -> str:
        """Opens rollout `rollout_id` (a random one when None) for `model`; its id."""
        rollout_id = rollout_id or secrets.token_hex(12)
        while len(self._open) >= self.max_open:
            self._open.pop(next(iter(self._open)))
        self._open[rollout_id] = Open(Trajectory(), model)
        return rollout_id

    def get(self, rollout_id: str, model: str = "") -> Trajectory | None:
        """The open rollout `rollout_id` of `model`, if there is one."""
        found = self._open.get(rollout_id)
        return found.trajectory if found is not None and found.model == model else None

    def owner(self, rollout_id: str) -> str | None:
        """The model rollout `rollout_id` was opened for, if it is open."""
        found = self._open.get(rollout_id)
        return None if found is None else found.model

    def finish(self, rollout_id: str, model: str = "") -> Trajectory | None:
        """The rollout's trajectory (its calls, the reward and metrics posted), no longer recorded into."""
        if self.get(rollout_id, model) is None:
            return None
        return self._open.pop(rollout_id).trajectory.finish()

    def unfinished(self) -> list[tuple[str, Trajectory]]:
        """Every open rollout, finished now (the gateway closes): its id and trajectory."""
        done = [(rollout_id, found.trajectory.finish()) for rollout_id, found in self._open.items()]
        self._open.clear()
        return done


async def recording(chunks: AsyncIterator[bytes], encoding: str, done: Callable[[bytes], None]) -> AsyncIterator[bytes]:
    """`chunks` passed on as they arrive (a stream reaches the agent token by token), then `done(body)` with the
    whole body, decoded when the server compressed it (`encoding`, its Content-Encoding: gzip or deflate)."""
    received = bytearray()
    async for chunk in chunks:
        received += chunk
        yield chunk
    body = bytes(received)
    if encoding in ("gzip", "deflate"):
        try:
            body = zlib.decompressobj(wbits=47 if encoding == "gzip" else 15).decompress(body)
        except zlib.error:
            return
    done(body)


def recorder(find: Callable[[], Trajectory | None], request: dict[str, Any], ok: bool) -> Callable[[bytes], None]:
    """What `recording` calls with a complete answer to `request`: its first choice added to the rollout's
    trajectory (`find()`, `Trajectory.add_completion`), unless the answer is an error or the rollout was finished
    meanwhile."""

    def record(answer: bytes) -> None:
        choice = recorded_choice(answer, streamed=bool(request.get("stream"))) if ok else None
        trajectory = find()
        if trajectory is not None and choice is not None:
            trajectory.add_completion(request["messages"], request.get("tools"), choice)

    return record
