"""`gather_trajectory_groups` and `gather_trajectories`: run many rollouts concurrently, with a progress bar;
`trajectory_group_batches`: their groups in batches as they finish."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from .progress import gather_counted, progress_bar
from .trajectories import Trajectory, TrajectoryGroup, outcome

AfterEach = Callable[[TrajectoryGroup], Awaitable[TrajectoryGroup | None] | TrajectoryGroup | None]


async def gather_trajectory_groups(
    groups: Iterable[TrajectoryGroup | Awaitable[TrajectoryGroup]],
    *,
    pbar_desc: str | None = "gather",
    max_exceptions: int | float = 0,
    after_each: AfterEach | None = None,
) -> list[TrajectoryGroup]:
    """Await every group's rollouts concurrently and return the groups in their input order.

    max_exceptions: how many failed rollouts to tolerate before raising the first failure; a float
        below 1 is a fraction of all rollouts. Failed rollouts are dropped from their group and listed
        in `group.exceptions`.
    after_each: called with each group as soon as its rollouts finish (e.g. to score it with a judge);
        it may return a replacement group, or None to drop the group. Sync or async.
    pbar_desc: the progress bar's label; None hides the bar. It counts the rollouts still to run (a group's
        trajectories given already made are not), and with `after_each` also the groups done (`after_each`
        returned), e.g. judged; a plain line every few seconds off a terminal.
    """
    groups = list(groups)
    total = sum(g.pending if isinstance(g, TrajectoryGroup) else 0 for g in groups)
    bar = progress_bar(pbar_desc, total, "rollout")
    failures = finished = 0

    def postfix() -> None:
        done = f"groups done {finished}/{len(groups)}" if after_each is not None else ""
        bar.set_postfix_str(", ".join(filter(None, [done, f"exceptions {failures}" if failures else ""])))

    def on_done(ok: bool) -> None:
        nonlocal failures
        failures += not ok
        postfix()
        bar.update(1)

    async def finish(group: TrajectoryGroup | Awaitable[TrajectoryGroup]) -> TrajectoryGroup | None:
        nonlocal finished
        if isinstance(group, TrajectoryGroup):
            group = await group.resolve(on_done)
        else:
            group = await group
            bar.update(len(group))
        if after_each is None:
            return group
        result = after_each(group)
        result = await result if inspect.isawaitable(result) else result
        finished += 1
        postfix()
        bar.update(0)
        return result

    try:
        results = await asyncio.gather(*(finish(g) for g in groups))
    finally:
        bar.close()
    done = [g for g in results if g is not None]
    rollouts = sum(len(g) + len(g.exceptions) for g in done)
    errors = [e for g in done for e in g.raised] or [RuntimeError(e) for g in done for e in g.exceptions]
    raise_past_limit(errors, rollouts, max_exceptions)
    return done


async def gather_trajectories(
    trajectories: Iterable[Awaitable[Trajectory]],
    *,
    pbar_desc: str | None = "gather",
    max_exceptions: int | float = 0,
) -> list[Trajectory | BaseException]:
    """Await rollouts concurrently (ART's `gather_trajectories`, e.g. a validation batch for `Model.log`) and
    return their trajectories in input order; a failed rollout's place holds its exception while at most
    `max_exceptions` fail (a float below 1: that share of them), else the first failure is raised."""
    results = await gather_counted((outcome(a) for a in trajectories), pbar_desc, "rollout")
    raise_past_limit([r for r in results if isinstance(r, BaseException)], len(results), max_exceptions)
    return results


def raise_past_limit(errors: list[BaseException], rollouts: int, max_exceptions: int | float) -> None:
    """Raise the first of `errors` when there are more than `max_exceptions` (a float below 1: that share of
    `rollouts`)."""
    limit = max_exceptions * rollouts if isinstance(max_exceptions, float) and max_exceptions < 1 else max_exceptions
    if len(errors) > limit:
        raise errors[0]


async def trajectory_group_batches(
    groups: Iterable[TrajectoryGroup | Awaitable[TrajectoryGroup]],
    *,
    batch_size: int,
    max_batch_exceptions: int | float = 0,
    max_concurrent_batches: int = 4,
    skip_batches: int = 0,
    pbar_desc: str | None = "batches",
    pbar_total_completion_tokens: bool = True,
) -> AsyncIterator[list[TrajectoryGroup]]:
    """Batches of `batch_size` groups in the order their rollouts finish (ART's `art.trajectory_group_batches`), so
    a step trains on the first groups done while later ones still roll out; the last batch may be smaller.

    max_concurrent_batches: groups of at most this many batches roll out at once.
    max_batch_exceptions: failed rollouts tolerated per batch (a float below 1: that share of its rollouts), as
        `gather_trajectory_groups`' `max_exceptions`; past it the batch's first failure is raised.
    skip_batches: the groups of this many first batches are not run (a resumed run).
    pbar_desc: the bar's label (it counts groups); None hides it. pbar_total_completion_tokens: ART's, accepted.
    """
    if batch_size < 1:
        raise ValueError(f"trajectory_group_batches: batch_size must be at least 1, got {batch_size}")
    waiting = list(groups)
    for skipped in waiting[: batch_size * skip_batches]:  # never run: their rollouts are closed unstarted
        if isinstance(skipped, TrajectoryGroup):
            skipped.discard()
        elif inspect.iscoroutine(skipped):
            skipped.close()
    waiting = waiting[batch_size * skip_batches :]
    bar = progress_bar(pbar_desc, len(waiting), "group")
    running: set[asyncio.Future[TrajectoryGroup]] = set()
    batch: list[TrajectoryGroup] = []

    def checked(done: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        errors = [e for g in done for e in g.raised] or [RuntimeError(e) for g in done for e in g.exceptions]
        raise_past_limit(errors, sum(len(g) + len(g.exceptions) for g in done), max_batch_exceptions)
        return done

    try:
        while waiting or running:
            while waiting and len(running) < batch_size * max_concurrent_batches:
                group = waiting.pop(0)
                running.add(asyncio.ensure_future(group.resolve() if isinstance(group, TrajectoryGroup) else group))
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            batch += [task.result() for task in done]
            bar.update(len(done))
            while len(batch) >= batch_size:
                yield checked(batch[:batch_size])
                batch = batch[batch_size:]
        if batch:
            yield checked(batch)
    finally:
        for task in running:
            task.cancel()
        bar.close()
