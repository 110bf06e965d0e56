"""Pipelined acknowledgement (services.runtime.acks.run_batches): a batch is acknowledged only
after its own fsync wait returned, in the order batches were taken, while the next batch is
handled; a batch whose finishing step did not complete is never acknowledged, nor any after it.

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


async def test_acknowledged_after_its_own_fsync_in_order_while_the_next_is_handled():
    log: list[tuple[str, int]] = []
    handled = [asyncio.Event() for _ in range(4)]

    async def handle(events: list[Ev]) -> int:
        log.append(("handled", events[0].batch))
        handled[events[0].batch].set()
        return events[0].batch

    async def finish(events: list[Ev], b: int) -> None:
        log.append(("fsync-wait", b))
        if b + 1 < len(handled):  # the fsync returns only once the next batch is handled
            await handled[b + 1].wait()
        log.append(("fsync-returned", b))

    drain = Drain(30)
    await asyncio.wait_for(
        run_batches(take_events(4, log), drain, handle, finish, acker(log)), GUARD_S
    )
    await asyncio.wait_for(drain.settle(), GUARD_S)  # the last batch finishes behind the loop

    assert ("faust-ack", 0) not in log and all(step != "faust-ack" for step, _ in log)
    acks = [b for step, b in log if step == "ack"]
    assert acks == [0, 1, 2, 3]
    for b in range(4):
        assert log.index(("fsync-returned", b)) < log.index(("ack", b))
        if b:
            assert log.index(("ack", b - 1)) < log.index(("fsync-wait", b))
    # batch 1 was handled while batch 0 waited for its fsync
    assert log.index(("fsync-wait", 0)) < log.index(("handled", 1))
    assert log.index(("handled", 1)) < log.index(("fsync-returned", 0))


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

    run = asyncio.create_task(run_batches(take_events(3, log), drain, handle, finish, acker(log)))
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
        run_batches(one_batch_then_wait(), Drain(30), handle, finish, acker(log))
    )
    await asyncio.wait_for(waiting.wait(), GUARD_S)
    run.cancel()  # faust stopping the agent, or restarting it on a rebalance
    with pytest.raises(asyncio.CancelledError):
        await run
    assert log == [("finish-stopped", 0)]  # stopped, never acknowledged


async def test_a_failed_finish_fails_the_next_batch_and_acknowledges_neither():
    log: list[tuple[str, int]] = []

    async def handle(events: list[Ev]) -> int:
        return events[0].batch

    async def finish(events: list[Ev], b: int) -> None:
        raise RuntimeError("the broker refused the events")

    with pytest.raises(RuntimeError, match="refused"):
        await asyncio.wait_for(
            run_batches(take_events(3, log), Drain(30), handle, finish, acker(log)), GUARD_S
        )
    assert [s for s in log if s[0] in ("ack", "faust-ack")] == []
