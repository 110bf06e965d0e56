"""When a consumed batch is acknowledged, so that faust may commit its offsets.

A batch is acknowledged only after its writes are fsynced (``GAAMA_DURABILITY``) and its events
are accepted by the broker. That finishing step waits mostly on the AOF fsync (up to a second
with ``appendfsync everysec``), so it runs in the background while the next batches are handled
(:class:`Behind`): batch N's fsync wait overlaps the embedding of batch N+1 and, with
``GAAMA_BATCHES_BEHIND`` above 1, of the batches after it. The guarantee does not change:

- a batch's offsets are acknowledged only by its own finishing step, after its fsync wait
  returned and its events were published (faust's ``take_events`` acknowledges a batch when it
  asks for the next one; :func:`hold` keeps it from doing so);
- a batch's deferred writes (``write``: ingest's episode appends, which need no reply before
  the next batch is embedded) run once the batch taken before it has written its own, so writes
  land in the order batches were taken; its fsync wait starts as soon as they are done, whatever
  is still finishing before it (one fsync then covers every batch written before it); its
  publication and acknowledgement wait for the batch taken before it to have been acknowledged,
  so events go out in order and a batch is never acknowledged before the one taken before it;
- at most ``depth`` batches finish behind the one being handled, so no more than ``depth + 1``
  batches are unacknowledged at a time;
- a batch whose finishing step did not complete (cancelled on a rebalance or a stop, abandoned at
  the shutdown deadline, failed) is never acknowledged, and neither is any batch after it: the
  broker delivers them again, and the writes are idempotent.

Why more than one: with ``everysec`` Redis fsyncs about once a second. With one batch behind,
a batch handled in less than that waits for an fsync of its own, so ingest runs at the fsync's
pace, not the embedder's; with two behind, one fsync covers two batches
(docs/decisions/0015-batches-finish-behind.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
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


class Unfinished(Exception):
    """The batch before this one was not acknowledged, so this one may not be either."""


class _Finishing:
    """One batch finishing behind: ``written`` resolves once its deferred writes are done (False
    when they never will be), ``outcome`` once it is acknowledged (False: abandoned)."""

    def __init__(self, written: asyncio.Future[bool]) -> None:
        self.written = written
        self.outcome: asyncio.Task[bool] | asyncio.Future[bool] | None = None


class Behind:
    """The batches finishing (deferred writes, fsync wait, publication, acknowledgement) behind
    the batch being handled, oldest first: at most ``depth`` of them."""

    def __init__(self, drain: Drain, depth: int = 1) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.drain = drain
        self.depth = depth
        self._batches: deque[_Finishing] = deque()
        self._broken = False  # a batch was not acknowledged: no later one may be

    def pending(self) -> bool:
        """Whether a batch is still finishing behind."""
        return bool(self._batches)

    async def settled(self) -> bool:
        """Wait for the oldest batch finishing behind; False when its finishing step was
        abandoned, cancelled or could not run (one before it did not finish), so that it is not
        acknowledged and nothing after it may be. Its error, if it failed, is raised here."""
        if not self._batches:
            return not self._broken
        task = self._batches[0].outcome
        assert task is not None
        try:
            # Shielded: a caller cancelled meanwhile leaves the task to cancel() (still held).
            finished = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():  # this caller was cancelled, not the finishing step
                raise
            finished = False
        except Unfinished:
            finished = False
        except BaseException:
            self._batches.popleft()
            self._broken = True
            raise
        self._batches.popleft()
        self._broken = self._broken or not finished
        return finished

    async def room(self) -> bool:
        """Wait until fewer than ``depth`` batches finish behind; False once one of them (or any
        earlier batch) was not acknowledged: then no further batch may be."""
        while len(self._batches) >= self.depth:
            if not await self.settled():
                return False
        return not self._broken

    def start(
        self,
        write: Callable[[], Awaitable[None]],
        wait: Callable[[], Awaitable[None]],
        finish: Callable[[], Awaitable[None]],
    ) -> None:
        """Finish a batch in the background: ``write`` (its deferred writes) once the batch
        before it has written, then ``wait`` (its fsync wait), then, once the batch before it is
        acknowledged, ``finish`` (publication and acknowledgement). Call after :meth:`room`
        returned True."""
        if len(self._batches) >= self.depth:
            raise RuntimeError("too many batches finishing: await room() first")
        before = self._batches[-1] if self._batches else None
        me = _Finishing(asyncio.get_running_loop().create_future())
        me.outcome = self.drain.follow(self._finish(before, me, write, wait, finish))
        self._batches.append(me)

    @staticmethod
    async def _finish(
        before: _Finishing | None,
        me: _Finishing,
        write: Callable[[], Awaitable[None]],
        wait: Callable[[], Awaitable[None]],
        finish: Callable[[], Awaitable[None]],
    ) -> None:
        try:
            if before is not None and not await _ok(before.written):
                raise Unfinished("the batch before it did not write")
            await write()
        except BaseException:
            me.written.set_result(False)
            raise
        me.written.set_result(True)
        await wait()
        if before is not None:
            assert before.outcome is not None
            if not await _ok(before.outcome):
                raise Unfinished("the batch before it was not acknowledged")
        await finish()

    async def cancel(self) -> None:
        """Cancel every batch finishing behind (their offsets stay unacknowledged), and wait
        until they have stopped."""
        batches, self._batches = list(self._batches), deque()
        self._broken = self._broken or bool(batches)
        tasks = [b.outcome for b in batches if b.outcome is not None]
        for task in tasks:
            if not task.done():
                task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _ok(step: asyncio.Future[bool]) -> bool:
    """Whether an earlier batch's step (its writes, its acknowledgement) completed; False when it
    failed, was cancelled or abandoned (its error is raised to the consumer by
    :meth:`Behind.settled`, not here)."""
    try:
        return await asyncio.shield(step)
    except asyncio.CancelledError:
        if not step.cancelled():
            raise  # this batch's own step was cancelled
        return False
    except Exception:  # noqa: BLE001 - the earlier batch's failure, raised where it is settled
        return False


async def run_batches(
    batches: AsyncIterable[list[Any]],
    drain: Drain,
    handle: Callable[[list[Any]], Awaitable[R]],
    wait: Callable[[list[Any], R], Awaitable[None]],
    finish: Callable[[list[Any], R], Awaitable[None]],
    ack: Callable[[list[Any]], None],
    depth: int = 1,
    write: Callable[[list[Any], R], Awaitable[None]] | None = None,
) -> None:
    """Consume ``batches`` (faust's ``take_events``): each is held, handled (``handle``, under
    ``drain``), then its deferred writes made (``write``), waited for (``wait``: the fsync
    wait), finished (``finish``: publication) and acknowledged (``ack``) behind the handling of
    the next ones, up to ``depth`` batches behind, in order, as the module docstring says."""
    behind = Behind(drain, depth)

    async def one(events: list[Any]) -> None:
        result = await handle(events)
        # Only if every batch before this one finished may this one.
        if await behind.room():
            behind.start(
                lambda: write(events, result) if write is not None else _nothing(),
                lambda: wait(events, result),
                lambda: done(events, result),
            )

    async def done(events: list[Any], result: R) -> None:
        await finish(events, result)
        ack(events)

    try:
        async for events in batches:
            # Acknowledged by done() or never (a shutdown, a rebalance, an error): then the
            # next owner of the partition gets the batch again.
            hold(events)
            await drain.run(one(events))
        # The input ended (faust's stream does not, short of a stop): finish what is behind.
        while behind.pending() and await behind.settled():
            pass
    finally:  # faust stopping or restarting the agent
        await behind.cancel()


async def _nothing() -> None:
    return None
