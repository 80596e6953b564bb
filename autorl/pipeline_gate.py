"""Which policy `autorl.PipelineTrainer`'s rollout workers sample, and when they may start a group.

The gate holds the newest trained policy version (what the rollouts sample) and the step being trained, and
admits a worker to start a group only while that policy is at most `max_steps_off_policy` versions behind the
step being trained and fewer than `limit` groups that can still be trained in time are in flight or waiting
(claimed and not yet taken by the training stage). More could only wait past the bound and be dropped as
stale; a claim too old to be trained (a straggler) holds no place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class PolicyGate:
    """The rollouts' policy version and their admission (the module docstring says how)."""

    def __init__(self, max_steps_off_policy: int, limit: int, version: int) -> None:
        self.max_steps_off_policy, self.limit = max_steps_off_policy, limit
        self.version = version
        """The newest trained step: what the rollouts sample from."""
        self.training = version  # the step being trained (version + 1 during an update)
        self._claims: list[int] = []  # the policy version of each group claimed and not yet taken
        self._changed = asyncio.Condition()

    async def claim(self, stopped: Callable[[], bool]) -> int:
        """Wait until a group may be started (or `stopped()`), claim it, and return the version it samples."""
        async with self._changed:
            await self._changed.wait_for(lambda: stopped() or self._admits())
            self._claims.append(self.version)
            return self.version

    def _admits(self) -> bool:
        oldest = self.training - self.max_steps_off_policy
        return self.version >= oldest and sum(version >= oldest for version in self._claims) < self.limit

    async def release(self, version: int) -> None:
        """A claimed group was taken off the queue (or never started): another may be claimed."""
        async with self._changed:
            self._claims.remove(version)
            self._changed.notify_all()

    async def set(self, version: int, training: int) -> None:
        """The newest policy and the step being trained changed (or the pipeline stopped: waiters look again)."""
        async with self._changed:
            self.version, self.training = version, training
            self._changed.notify_all()
