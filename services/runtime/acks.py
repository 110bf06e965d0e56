"""When a consumed batch is acknowledged, so that faust may commit its offsets.

A batch is acknowledged only after its writes are fsynced (``GAAMA_DURABILITY``) and its events
are accepted by the broker. That finishing step waits mostly on the AOF fsync (up to a second
with ``appendfsync everysec``), so it runs in the background while the next batch is handled
(:class:`Behind`): batch N's fsync wait overlaps batch N+1's embedding. The guarantee does not
change:

- a batch's offsets are acknowledged only by its own finishing step, after its fsync wait
  returned and its events were published (faust's ``take_events`` acknowledges a batch when it
  asks for the next one; :func:`hold` keeps it from doing so);
- batches finish one at a time, in the order they were taken: batch N+1's finishing step starts
  only once batch N's has acknowledged it, so events go out in order and a batch is never
  acknowledged before the one taken before it;
- at most one batch finishes behind the one being handled, so no more than two batches are
  unacknowledged at a time;
- a batch whose finishing step did not complete (cancelled on a rebalance or a stop, abandoned at
  the shutdown deadline) is never acknowledged, and neither is any batch after it: the broker
  delivers them again, and the writes are idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from services.runtime.shutdown import Drain

R = TypeVar("R")


def hold(events: list[Any]) -> None:
    """Keep faust from acknowledging ``events`` itself.

    ``take_events`` acknowledges every event of a batch when the generator resumes or is closed,
    a batch cancelled half-way included; ``Message.ack`` skips a message already marked acked,
    so until :func:`acknowledge` these offsets are never committed.
    """
    for event in events:
        event.message.acked = True


def acknowledge(consumer: Any, events: list[Any]) -> None:
    """Acknowledge held ``events``: their offsets may be committed from now on."""
    for event in events:
        message = event.message
        message.acked = False  # held by hold(); the consumer's ack sets it again
        consumer.ack(message)


class Behind:
    """The one batch finishing (fsync wait, publication, acknowledgement) behind the batch being
    handled."""

    def __init__(self, drain: Drain) -> None:
        self.drain = drain
        self._task: asyncio.Task[bool] | None = None

    async def settled(self) -> bool:
        """Wait for the batch finishing behind; False when its finishing step was abandoned or
        cancelled, so that it is not acknowledged and nothing after it may be. Its error, if it
        failed, is raised here."""
        task = self._task
        if task is None:
            return True
        try:
            # Shielded: a caller cancelled meanwhile leaves the task to cancel() (still held).
            finished = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():  # this caller was cancelled, not the finishing step
                raise
            finished = False
        except BaseException:
            self._task = None
            raise
        self._task = None
        return finished

    def start(self, finish: Coroutine[Any, Any, None]) -> None:
        """Finish a batch in the background; call after :meth:`settled` returned True."""
        if self._task is not None:
            finish.close()
            raise RuntimeError("a batch is still finishing: await settled() first")
        self._task = self.drain.follow(finish)

    async def cancel(self) -> None:
        """Cancel the batch finishing behind, if any (its offsets stay unacknowledged), and wait
        until it has stopped."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def run_batches(
    batches: AsyncIterable[list[Any]],
    drain: Drain,
    handle: Callable[[list[Any]], Awaitable[R]],
    finish: Callable[[list[Any], R], Awaitable[None]],
    ack: Callable[[list[Any]], None],
) -> None:
    """Consume ``batches`` (faust's ``take_events``): each is held, handled (``handle``, under
    ``drain``), then finished (``finish``: the fsync wait and publication) and acknowledged
    (``ack``) behind the next batch's handling, in order, as the module docstring says."""
    behind = Behind(drain)

    async def one(events: list[Any]) -> None:
        result = await handle(events)
        # The batch before this one finishes first, and only if it finished may this one.
        if await behind.settled():
            behind.start(done(events, result))

    async def done(events: list[Any], result: R) -> None:
        await finish(events, result)
        ack(events)

    try:
        async for events in batches:
            # Acknowledged by done() or never (a shutdown, a rebalance, an error): then the
            # next owner of the partition gets the batch again.
            hold(events)
            await drain.run(one(events))
    finally:  # faust stopping or restarting the agent
        await behind.cancel()
