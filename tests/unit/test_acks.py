"""Pipelined acknowledgement (services.runtime.acks.run_batches): a batch is acknowledged only
after its own fsync wait returned, in the order batches were taken, while the next batches are
handled (up to ``depth`` behind); a batch whose finishing step did not complete is never
acknowledged, nor any after it.

The steps are driven by events, not timing: a run that finished each batch before handling the
next would wait forever for the next batch's handling (each wait is bounded by GUARD_S so that
such a run fails instead of hanging)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from services.runtime.acks import run_batches
from services.runtime.shutdown import Drain

GUARD_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Message:
    acked: bool = False


@dataclass
class Ev:
    batch: int
    message: Message = field(default_factory=Message)


async def take_events(n: int, log: list[tuple[str, int]]) -> AsyncIterator[list[Ev]]:
    """``n`` batches of two events, acknowledging each batch as faust's take_events does: when
    the consumer asks for the next batch (an ack of a message not marked acked yet)."""
    for b in range(n):
        events = [Ev(b), Ev(b)]
        yield events
        for e in events:
            if not e.message.acked:
                e.message.acked = True
                log.append(("faust-ack", b))


def acker(log: list[tuple[str, int]]):
    def ack(events: list[Ev]) -> None:
        assert all(e.message.acked for e in events)  # held until now
        log.append(("ack", events[0].batch))

    return ack


async def _nothing(events: list[Ev], b: int) -> None:
    pass


def logged_publish(log: list[tuple[str, int]]):
    async def publish(events: list[Ev], b: int) -> None:
        log.append(("publish", b))

    return publish


async def test_acknowledged_after_its_own_fsync_in_order_while_the_next_is_handled():
    log: list[tuple[str, int]] = []
    handled = [asyncio.Event() for _ in range(4)]

    async def handle(events: list[Ev]) -> int:
        log.append(("handled", events[0].batch))
        handled[events[0].batch].set()
        return events[0].batch

    async def fsync(events: list[Ev], b: int) -> None:
        log.append(("fsync-wait", b))
        if b + 1 < len(handled):  # the fsync returns only once the next batch is handled
            await handled[b + 1].wait()
        log.append(("fsync-returned", b))

    drain = Drain(30)
    await asyncio.wait_for(
        run_batches(take_events(4, log), drain, handle, fsync, logged_publish(log), acker(log)),
        GUARD_S,
    )
    await asyncio.wait_for(drain.settle(), GUARD_S)  # the last batch finishes behind the loop

    assert ("faust-ack", 0) not in log and all(step != "faust-ack" for step, _ in log)
    acks = [b for step, b in log if step == "ack"]
    assert acks == [0, 1, 2, 3]
    for b in range(4):
        assert log.index(("handled", b)) < log.index(("fsync-wait", b))
        assert log.index(("fsync-returned", b)) < log.index(("publish", b))
        assert log.index(("publish", b)) < log.index(("ack", b))
        if b:
            assert log.index(("ack", b - 1)) < log.index(("publish", b))
    # batch 1 was handled while batch 0 waited for its fsync
    assert log.index(("fsync-wait", 0)) < log.index(("handled", 1))
    assert log.index(("handled", 1)) < log.index(("fsync-returned", 0))


async def test_two_behind_one_fsync_covers_two_batches():
    """With depth 2, batch 2 is handled while batches 0 and 1 both wait for their fsync, and
    their waits run at once (as one fsync of Redis covers both). With depth 1 the handling of
    batch 2 waits for batch 0's fsync, which here waits for batch 2: the run would hang."""
    log: list[tuple[str, int]] = []
    handled = [asyncio.Event() for _ in range(5)]
    waiting = [asyncio.Event() for _ in range(5)]

    async def handle(events: list[Ev]) -> int:
        b = events[0].batch
        log.append(("handled", b))
        handled[b].set()
        return b

    async def fsync(events: list[Ev], b: int) -> None:
        log.append(("fsync-wait", b))
        waiting[b].set()
        if b + 2 < len(handled):  # returns only once two more batches are handled
            await handled[b + 2].wait()
        if b % 2 == 0 and b + 1 < len(waiting):
            await waiting[b + 1].wait()  # an even batch's wait overlaps the next batch's
        log.append(("fsync-returned", b))

    drain = Drain(30)
    await asyncio.wait_for(
        run_batches(
            take_events(5, log), drain, handle, fsync, logged_publish(log), acker(log), depth=2
        ),
        GUARD_S,
    )
    await asyncio.wait_for(drain.settle(), GUARD_S)
    assert [b for step, b in log if step == "ack"] == [0, 1, 2, 3, 4]
    assert all(step != "faust-ack" for step, _ in log)
    for b in range(1, 5):
        assert log.index(("ack", b - 1)) < log.index(("publish", b))
        assert log.index(("fsync-returned", b)) < log.index(("ack", b))
    assert log.index(("handled", 2)) < log.index(("fsync-returned", 0))
    assert log.index(("fsync-wait", 1)) < log.index(("fsync-returned", 0))


async def test_never_more_than_depth_behind():
    """A batch whose fsync never returns: depth 2 lets two more batches be handled, then the
    consumer takes no batch until it returns, and nothing is acknowledged."""
    log: list[tuple[str, int]] = []
    third = asyncio.Event()

    async def handle(events: list[Ev]) -> int:
        log.append(("handled", events[0].batch))
        if events[0].batch == 2:
            third.set()
        return events[0].batch

    async def fsync(events: list[Ev], b: int) -> None:
        if b == 0:
            await asyncio.Event().wait()

    run = asyncio.create_task(
        run_batches(take_events(6, log), Drain(30), handle, fsync, _nothing, acker(log), depth=2)
    )
    await asyncio.wait_for(third.wait(), GUARD_S)
    for _ in range(20):  # let the loop run: batch 3 must not be taken
        await asyncio.sleep(0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert [b for step, b in log if step == "handled"] == [0, 1, 2]
    assert [s for s in log if s[0] in ("ack", "faust-ack")] == []


async def test_an_abandoned_finish_leaves_its_batch_and_the_next_unacknowledged():
    log: list[tuple[str, int]] = []
    clock = Clock()
    drain = Drain(30, clock)
    second = asyncio.Event()

    async def handle(events: list[Ev]) -> int:
        log.append(("handled", events[0].batch))
        if events[0].batch == 1:
            second.set()
        return events[0].batch

    async def finish(events: list[Ev], b: int) -> None:
        await asyncio.Event().wait()  # an fsync that never returns

    run = asyncio.create_task(
        run_batches(take_events(3, log), drain, handle, finish, _nothing, acker(log))
    )
    await asyncio.wait_for(second.wait(), GUARD_S)
    drain.begin()  # SIGTERM
    clock.now += 30  # past the batch deadline
    assert await asyncio.wait_for(drain.settle(), GUARD_S) is False  # abandoned
    await asyncio.wait_for(run, GUARD_S)
    assert [s for s in log if s[0] in ("ack", "faust-ack")] == []
    assert ("handled", 2) not in log  # taken after SIGTERM: never started


async def test_cancelling_the_agent_cancels_the_finish_behind_it():
    log: list[tuple[str, int]] = []
    waiting = asyncio.Event()

    async def handle(events: list[Ev]) -> int:
        return events[0].batch

    async def finish(events: list[Ev], b: int) -> None:
        waiting.set()
        try:
            await asyncio.Event().wait()
        finally:
            log.append(("finish-stopped", b))

    async def one_batch_then_wait() -> AsyncIterator[list[Ev]]:
        yield [Ev(0)]
        await asyncio.Event().wait()  # no more input
        yield [Ev(1)]  # pragma: no cover

    run = asyncio.create_task(
        run_batches(one_batch_then_wait(), Drain(30), handle, finish, _nothing, acker(log))
    )
    await asyncio.wait_for(waiting.wait(), GUARD_S)
    run.cancel()  # faust stopping the agent, or restarting it on a rebalance
    with pytest.raises(asyncio.CancelledError):
        await run
    assert log == [("finish-stopped", 0)]  # stopped, never acknowledged


@pytest.mark.parametrize("depth", [1, 2])
async def test_a_failed_finish_fails_the_next_batch_and_acknowledges_neither(depth: int):
    log: list[tuple[str, int]] = []

    async def handle(events: list[Ev]) -> int:
        return events[0].batch

    async def finish(events: list[Ev], b: int) -> None:
        raise RuntimeError("the broker refused the events")

    with pytest.raises(RuntimeError, match="refused"):
        await asyncio.wait_for(
            run_batches(
                take_events(3, log), Drain(30), handle, _nothing, finish, acker(log), depth
            ),
            GUARD_S,
        )
    assert [s for s in log if s[0] in ("ack", "faust-ack")] == []


async def test_deferred_writes_land_in_batch_order_before_the_fsync_wait():
    """A batch's deferred writes start only once the batch before it has made its own (here the
    writes of batch 0 are held until batch 2 is handled), its fsync wait only after them; the
    next batches are handled meanwhile."""
    log: list[tuple[str, int]] = []
    handled = [asyncio.Event() for _ in range(4)]

    async def handle(events: list[Ev]) -> int:
        b = events[0].batch
        log.append(("handled", b))
        handled[b].set()
        return b

    async def write(events: list[Ev], b: int) -> None:
        log.append(("write", b))
        if b == 0:
            await handled[2].wait()
        log.append(("written", b))

    async def fsync(events: list[Ev], b: int) -> None:
        log.append(("fsync-wait", b))

    drain = Drain(30)
    await asyncio.wait_for(
        run_batches(
            take_events(4, log),
            drain,
            handle,
            fsync,
            logged_publish(log),
            acker(log),
            depth=2,
            write=write,
        ),
        GUARD_S,
    )
    await asyncio.wait_for(drain.settle(), GUARD_S)
    assert [b for step, b in log if step == "write"] == [0, 1, 2, 3]
    assert [b for step, b in log if step == "ack"] == [0, 1, 2, 3]
    for b in range(4):
        assert log.index(("written", b)) < log.index(("fsync-wait", b))
        if b:
            assert log.index(("written", b - 1)) < log.index(("write", b))
    assert log.index(("handled", 2)) < log.index(("written", 0))


async def test_a_failed_write_stops_every_later_batch_from_writing():
    log: list[tuple[str, int]] = []

    async def handle(events: list[Ev]) -> int:
        return events[0].batch

    async def write(events: list[Ev], b: int) -> None:
        log.append(("write", b))
        if b == 0:
            raise RuntimeError("a bug in a deferred write")

    with pytest.raises(RuntimeError, match="deferred write"):
        await asyncio.wait_for(
            run_batches(
                take_events(4, log),
                Drain(30),
                handle,
                _nothing,
                _nothing,
                acker(log),
                depth=2,
                write=write,
            ),
            GUARD_S,
        )
    assert [b for step, b in log if step == "write"] == [0]
    assert [s for s in log if s[0] in ("ack", "faust-ack")] == []
