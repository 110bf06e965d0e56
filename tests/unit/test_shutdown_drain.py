"""The shutdown plan of a consumer (services.runtime.shutdown.Drain) and the stalled state
(services.runtime.stall.Stall), on a clock the test moves."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Gauge

from services.runtime.shutdown import Drain, stop_reserve
from services.runtime.stall import Stall


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_batch_deadline_leaves_a_reserve_for_stopping():
    clock = Clock()
    drain = Drain(90, clock)
    assert drain.batch_deadline() is None and not drain.stopping
    drain.begin()
    assert drain.stopping
    assert drain.batch_deadline() == 1000 + 90 - 15
    assert stop_reserve(8) == 5 and stop_reserve(30) == 7.5 and stop_reserve(600) == 15


async def test_a_batch_in_hand_is_finished_before_the_stop():
    drain = Drain(30, Clock())
    release = asyncio.Event()
    done: list[str] = []

    async def batch() -> None:
        await release.wait()
        done.append("written")

    running = asyncio.create_task(drain.run(batch()))
    await asyncio.sleep(0)
    drain.begin()
    settling = asyncio.create_task(drain.settle())
    await asyncio.sleep(0)
    assert not settling.done()  # still waiting for the batch
    release.set()
    assert await running is True  # finished: it may be acknowledged
    assert await settling is True
    assert done == ["written"]


async def test_a_batch_past_the_deadline_is_abandoned_and_one_after_sigterm_never_starts():
    clock = Clock()
    drain = Drain(30, clock)
    cleaned: list[str] = []

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("lock released")

    running = asyncio.create_task(drain.run(stuck()))
    await asyncio.sleep(0)
    drain.begin()
    clock.now += 30  # past the batch deadline
    assert await drain.settle() is False
    assert await running is False  # abandoned: never acknowledged
    assert cleaned == ["lock released"]

    started: list[str] = []

    async def late() -> None:
        started.append("late")

    assert await drain.run(late()) is False
    assert started == []


async def test_cancelling_the_caller_cancels_the_batch_and_propagates():
    drain = Drain(30, Clock())
    running = asyncio.create_task(drain.run(asyncio.Event().wait()))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    running.cancel()
    try:
        await running
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancellation was swallowed")
    assert await drain.settle() is True  # nothing left in flight


def test_stall_reports_the_oldest_outage_until_every_source_recovers():
    clock = Clock(1_700_000_000.0)
    registry = CollectorRegistry()
    stall = Stall(Gauge("t_stalled_since", "x", ["reason"], registry=registry), clock)

    def since(reason: str) -> float | None:
        return registry.get_sample_value("t_stalled_since", {"reason": reason})

    assert stall.current() is None
    stall.failed("batch", "store_unavailable", "Redis timed out")
    clock.now += 5
    stall.failed("batch", "store_unavailable", "Redis timed out again")  # same outage
    stall.failed("idle_chunks", "store_unavailable", "Redis timed out")
    now = stall.current()
    assert now is not None and now.since == 1_700_000_000.0
    assert now.as_json() == {
        "status": "stalled",
        "reason": "store_unavailable: Redis timed out again",
        "since": "2023-11-14T22:13:20+00:00",
    }
    assert since("store_unavailable") == 1_700_000_000.0
    assert since("broker_unavailable") == 0
    stall.ok("batch")
    assert stall.current() is not None  # the timer still fails
    stall.ok("idle_chunks")
    assert stall.current() is None
    assert since("store_unavailable") == 0
