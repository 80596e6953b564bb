"""ART's capture scopes (`autorl.trajectory`, `trajectory_group`, `current_trajectory`, `no_capture`; ART's 2025
names `capture_auto_trajectory`, `auto_trajectory`) and `yield_trajectory` / `capture_yielded_trajectory`.

    async def rollout(scenario):                      # no trajectory code: a plain OpenAI agent
        reply = await client.chat.completions.create(model=name, messages=[...], tools=tools)
        ...                                           # its tool results sent back in the next request
        art.current_trajectory(require=True).reward = score(reply)

    group = await art.trajectory_group(art.trajectory(rollout(s)) for _ in range(8))

Every chat completion made through httpx inside the scope (the OpenAI SDK, sync or async, streamed or not;
LiteLLM and LangChain's `ChatOpenAI`, which use it) is recorded into the scope's `Trajectory`
(`Trajectory.add_completion`): its messages are context, its `Choice`s (with their logprobs) are trained.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Coroutine, Iterable, Iterator
from typing import Any

from ..errors import NoTrajectoryError
from ..trajectories import Trajectory, TrajectoryGroup
from . import recorder


def current_trajectory(*, require: bool = False, required: bool | None = None) -> Trajectory | None:
    """The trajectory of the innermost capture scope this code runs in (set its `reward` there), or None;
    `require=True` (ART 2025: `required=True`) makes None a `NoTrajectoryError`."""
    trajectory = recorder.current()
    if trajectory is None and (require or required):
        raise NoTrajectoryError(
            "no trajectory: current_trajectory(require=True) runs only inside `await autorl.trajectory(coroutine)` "
            "or `with autorl.Trajectory() as t:`"
        )
    return trajectory


auto_trajectory = current_trajectory
"""ART's 2025 name of `current_trajectory`."""


@contextlib.contextmanager
def no_capture() -> Iterator[None]:
    """Chat completions made inside are recorded by no enclosing scope (a judge's, a side question's); a new
    scope begun inside records as usual."""
    token = recorder.hide()
    try:
        yield
    finally:
        recorder.unhide(token)


async def trajectory(coroutine: Coroutine[Any, Any, object]) -> Trajectory:
    """Runs `coroutine` in a new capture scope and returns its `Trajectory`: every chat completion it made,
    the reward and metrics it set on `current_trajectory()`, `metrics["duration"]`. Its own return value is
    dropped, as ART's is."""
    if not asyncio.iscoroutine(coroutine):
        raise TypeError(
            f"autorl.trajectory() takes a coroutine (call the async function), not {type(coroutine).__name__}"
        )
    with Trajectory() as captured:
        await coroutine
    return captured


capture_auto_trajectory = trajectory
"""ART's 2025 name of `trajectory`."""


async def trajectory_group(
    trajectories: Iterable[Trajectory | BaseException | Awaitable[Trajectory]], *, return_exceptions: bool = False
) -> TrajectoryGroup:
    """The group of `trajectories`, its awaitables (`autorl.trajectory(rollout(...))`, or rollouts returning a
    `Trajectory`) run concurrently outside any enclosing scope. A rollout that raises raises here, the others
    cancelled, unless `return_exceptions=True`: then it is an entry of the group's `exceptions`."""
    items = list(trajectories)
    with no_capture():
        tasks = {id(i): asyncio.ensure_future(i) for i in items if not isinstance(i, Trajectory | BaseException)}
        try:
            await asyncio.gather(*tasks.values(), return_exceptions=return_exceptions)
        except BaseException:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            raise
    results = [item if isinstance(item, Trajectory | BaseException) else _result(tasks[id(item)]) for item in items]
    return TrajectoryGroup(results)


def _result(task: asyncio.Future) -> Trajectory | Exception:
    """A finished rollout's trajectory or exception; anything else it returned is a `TypeError`."""
    error = task.exception()
    if error is not None and not isinstance(error, Exception):
        raise error
    result = error or task.result()
    if not isinstance(result, Trajectory | Exception):
        raise TypeError(f"a rollout of trajectory_group returned {type(result).__name__}, expected autorl.Trajectory")
    return result


_yielded: contextvars.ContextVar[list[Trajectory] | None] = contextvars.ContextVar("autorl_yielded", default=None)


def yield_trajectory(trajectory: Trajectory) -> None:
    """Hands `trajectory` to the enclosing `capture_yielded_trajectory` (the last one handed wins); outside one,
    nothing happens, as in ART."""
    yielded = _yielded.get()
    if yielded is not None:
        yielded.append(trajectory)


async def capture_yielded_trajectory(coroutine: Coroutine[Any, Any, object]) -> Trajectory:
    """Runs `coroutine` and returns the trajectory it handed over with `yield_trajectory`; `NoTrajectoryError`
    where it handed none."""
    token = _yielded.set([])
    try:
        await coroutine
        yielded = _yielded.get()
    finally:
        _yielded.reset(token)
    if not yielded:
        raise NoTrajectoryError("capture_yielded_trajectory: the coroutine ended without yield_trajectory(trajectory)")
    return yielded[-1]
