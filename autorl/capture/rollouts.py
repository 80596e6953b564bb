"""What every capture gateway shares, the standalone one (gateway.py: `CaptureGateway`, `autorl capture`) and the
per-model routes of `autorl serve` (`autorl.backends.remote.rollouts`): the open rollouts it records into, by id
(`Rollouts`); an answer relayed to the agent as it arrives and recorded once complete (`recording`); and what
goes over the wire (`Reward`, `OpenedRollout`, `FinishedRollout`, `GatewayRollout`). What an agent may ask of the
model is bounded as every chat request to a served model is (`ServeLimits.check_ask`); what the rollouts hold is
bounded here (`Rollouts`: open rollouts, calls and bytes per rollout and in all), a call past a bound refused
before it reaches the model with one line (`RolloutRefused`: 413 or 429).
"""

from __future__ import annotations

import json
import re
import secrets
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import AutoRLError
from ..trajectories import Trajectory
from .completions import recorded_choice

ROLLOUT_HEADER = "X-Autorl-Rollout"
"""The header that names a rollout on `/v1/chat/completions` (for an agent whose base URL cannot change)."""
ROLLOUT_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""What a rollout id may be: the gateway's own are random hex; `autorl capture` takes an agent's own name too."""
MAX_OPEN_ROLLOUTS = 4096
"""Rollouts a gateway records into at once; opening one more is refused (429) until one is finished."""
MAX_CALLS = 1024
"""Chat completions one rollout may record (an agent's turns, each a call); one more is refused (429)."""
MAX_ROLLOUT_BYTES = 64 * 2**20
"""What one rollout may hold, its recorded messages and choices as JSON; a call once it holds this much is
refused (413)."""
MAX_OPEN_BYTES = 1024 * 2**20
"""What the open rollouts may hold in all; a call while they hold this much is refused (429) until some finish."""


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
    calls: int = 0
    """The chat completions admitted into it (`Rollouts.admit`)."""
    held: int = 0
    """The bytes it holds: its recorded messages and choices, as JSON."""


class RolloutRefused(AutoRLError):
    """A call or a rollout past one of `Rollouts`' bounds: `status` (413 or 429) and one line saying which."""

    def __init__(self, status: int, line: str):
        super().__init__(line)
        self.status = status


class Rollouts:
    """The rollouts a gateway records into, by id, bounded: at most `max_open` open at once, `max_calls` calls
    and `max_rollout_bytes` held by each, `max_open_bytes` by all (`RolloutRefused` past one). A call is counted
    when admitted, its bytes once recorded, so a rollout passes its byte bound by one call's at most."""

    def __init__(
        self, max_open: int = MAX_OPEN_ROLLOUTS, max_calls: int = MAX_CALLS,
        max_rollout_bytes: int = MAX_ROLLOUT_BYTES, max_open_bytes: int = MAX_OPEN_BYTES,
    ):  # fmt: skip
        self.max_open, self.max_calls = max_open, max_calls
        self.max_rollout_bytes, self.max_open_bytes = max_rollout_bytes, max_open_bytes
        self.held = 0
        """What the open rollouts hold, in bytes."""
        self._open: dict[str, Open] = {}

    def open(self, rollout_id: str | None = None, model: str = "") -> str:
        """Opens rollout `rollout_id` (a random one when None) for `model`; its id. Past `max_open` open ones,
        `RolloutRefused` (429): none is dropped unwritten."""
        rollout_id = rollout_id or secrets.token_hex(12)
        if rollout_id not in self._open and len(self._open) >= self.max_open:
            raise RolloutRefused(429, f"{self.max_open} rollouts are open, the most recorded at once: finish one first")
        self._forget(rollout_id)
        self._open[rollout_id] = Open(Trajectory(), model)
        return rollout_id

    def admit(self, rollout_id: str) -> None:
        """Counts a call to open rollout `rollout_id`, or refuses it (`RolloutRefused`) when the rollout made
        `max_calls` (429), holds `max_rollout_bytes` (413), or all open ones hold `max_open_bytes` (429)."""
        found = self._open[rollout_id]
        if found.calls >= self.max_calls:
            raise RolloutRefused(429, f"rollout {rollout_id!r} made {found.calls} calls, the most one records")
        if found.held >= self.max_rollout_bytes:
            raise RolloutRefused(
                413,
                f"rollout {rollout_id!r} holds {found.held} bytes, the most one records is {self.max_rollout_bytes}",
            )
        if self.held >= self.max_open_bytes:
            raise RolloutRefused(
                429, f"the open rollouts hold {self.held} bytes, the most recorded at once: finish some first"
            )
        found.calls += 1

    def recorder(self, rollout_id: str, model: str, request: dict[str, Any], ok: bool) -> Callable[[bytes], None]:
        """What `recording` calls with a complete answer to `request`: its first choice added to the rollout's
        trajectory (`Trajectory.add_completion`) and its bytes counted, unless the answer is an error or the
        rollout was finished meanwhile."""

        def record(answer: bytes) -> None:
            choice = recorded_choice(answer, streamed=bool(request.get("stream"))) if ok else None
            trajectory = self.get(rollout_id, model)
            if trajectory is not None and choice is not None:
                added = trajectory.add_completion(request["messages"], request.get("tools"), choice)
                size = sum(len(json.dumps(item, default=str)) for item in added[:-1])
                size += len(choice.model_dump_json()) + len(json.dumps(request.get("tools"), default=str))
                self._open[rollout_id].held += size
                self.held += size

        return record

    def _forget(self, rollout_id: str) -> Open | None:
        found = self._open.pop(rollout_id, None)
        if found is not None:
            self.held -= found.held
        return found

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
        return self._forget(rollout_id).trajectory.finish()

    def unfinished(self) -> list[tuple[str, Trajectory]]:
        """Every open rollout, finished now (the gateway closes): its id and trajectory."""
        done = [(rollout_id, found.trajectory.finish()) for rollout_id, found in self._open.items()]
        self._open.clear()
        self.held = 0
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
