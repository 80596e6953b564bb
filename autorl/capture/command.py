"""`autorl capture`: a capture gateway in front of any OpenAI-compatible model, on its own, writing each rollout's
trajectory to a file. An agent in any language, on this machine, points its OpenAI base URL at a rollout address
of the gateway and posts its reward there when it is done; the trajectory is appended to the file then, as one JSON
line (`Trajectory.model_validate_json` reads it back). Rollouts still open when the gateway stops are written
too, marked: `metadata["reward_posted"]` says which got their reward. pipelines/cli_capture.py is the command.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from ..backends.remote.config import MIN_TOKEN_CHARS
from ..backends.remote.limits import ServeLimits
from ..errors import AutoRLError
from ..model import Model
from ..serving.auth import new_key
from ..trajectories import Trajectory
from .gateway import CaptureGateway

FIRST_ROLLOUT = "1"
"""The rollout id of the address `autorl capture` prints (an agent names its others itself)."""


def upstream(name: str, base_url: str, api_key_env: str | None) -> Model:
    """The model the gateway passes calls on to; its key read from `api_key_env` (one line when it is not set)."""
    key = None
    if api_key_env is not None:
        key = os.environ.get(api_key_env)
        if not key:
            raise AutoRLError(f"--api-key-env {api_key_env}: the variable is not set")
    return Model(name=name, inference_base_url=base_url.rstrip("/"), inference_api_key=key)


def gateway_key(key_env: str | None) -> tuple[str, str]:
    """The key agents must send, and how `autorl capture` shows it: a new one, shown as it is (the gateway lives
    as long as the process), or the value of `key_env`, shown as `$VAR`."""
    if key_env is None:
        key = new_key()
        return key, key
    key = os.environ.get(key_env, "")
    if len(key) < MIN_TOKEN_CHARS:
        raise AutoRLError(f"--key-env {key_env}: the variable is not set or shorter than {MIN_TOKEN_CHARS} characters")
    return key, f"${key_env}"


class TrajectoryFile:
    """A JSON Lines file of trajectories, appended to (created readable by its owner only)."""

    def __init__(self, path: Path):
        if not path.parent.is_dir():
            raise AutoRLError(f"--out {path}: no directory {path.parent}")
        self.path = path
        self.written = 0

    def write(self, rollout_id: str, trajectory: Trajectory, reward_posted: bool = True) -> None:
        trajectory.metadata.update(rollout=rollout_id, reward_posted=reward_posted)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(descriptor, "a") as file:
            file.write(trajectory.model_dump_json() + "\n")
        self.written += 1


async def capture(
    model: Model, out: Path, announce: Callable[[str], object], *, host: str = "127.0.0.1", port: int = 0,
    limits: ServeLimits | None = None, key: tuple[str, str] | None = None,
) -> None:  # fmt: skip
    """Serves a gateway in front of `model` until cancelled (Ctrl-C), writing each rollout to `out`; `announce`
    gets the address and key an agent uses. `key`: the key and how it is shown (`gateway_key`); never written."""
    file = TrajectoryFile(out)
    key, shown = key or gateway_key(None)
    gateway = CaptureGateway(model, host=host, port=port, limits=limits, on_reward=file.write, any_id=True, key=key)
    async with gateway:
        rollout = gateway.rollout(FIRST_ROLLOUT)
        announce(
            f"autorl capture: {gateway.url}, passing chat completions on to {model.name!r} at {model.inference_base_url}"
        )
        announce(f"OPENAI_BASE_URL={rollout.base_url}")
        announce(f"OPENAI_API_KEY={shown}")
        announce(
            f'Each rollout is its own id in place of {FIRST_ROLLOUT!r} (letters, digits, _.-); POST {{"reward": R}} '
            f"to .../rollouts/ID/reward ends one and appends it to {out}. Ctrl-C stops."
        )
        try:
            await asyncio.Event().wait()
        finally:
            for rollout_id, trajectory in gateway.rollouts.unfinished():
                if trajectory.messages_and_choices:
                    file.write(rollout_id, trajectory, reward_posted=False)
            announce(f"autorl capture: {file.written} trajectories in {out}")
