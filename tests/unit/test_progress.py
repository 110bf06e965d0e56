"""The no-progress watchdog: input waiting and nothing committed for the timeout makes a stage
not live; time without input, stalled on an outage, or after a commit does not count (a clock
of the test's own, no sleeping)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gaama.metrics import stage_metrics
from services.runtime.progress import Progress
from services.runtime.stall import Stall


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watchdog(timeout_s: float = 60.0) -> tuple[Progress, Stall, Clock, CollectorRegistry]:
    clock = Clock()
    registry = CollectorRegistry()
    m = stage_metrics("extract", registry)
    stall = Stall(m.stalled_since)
    return Progress(timeout_s, stall, m.no_progress, clock=clock), stall, clock, registry


def gauge(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("gaama_extract_no_progress_seconds")


def test_input_waiting_without_a_commit_trips_it_at_the_timeout():
    progress, _, clock, registry = watchdog(60)
    assert gauge(registry) == 0
    progress.observe({0: (100, 150), 1: (40, 40)})
    clock.now += 59
    progress.observe({0: (100, 150), 1: (40, 40)})
    assert progress.wedged() is None and gauge(registry) == 59
    clock.now += 1
    body = progress.wedged()
    assert body is not None and body["status"] == "no_progress"
    assert "nothing committed for 60s" in body["reason"]
    assert gauge(registry) == 60


def test_a_commit_starts_the_wait_again():
    progress, _, clock, _ = watchdog(60)
    progress.observe({0: (100, 150)})
    clock.now += 50
    progress.observe({0: (164, 200)})  # a batch committed, more has arrived
    clock.now += 50
    progress.observe({0: (164, 200)})
    assert progress.seconds() == 50 and progress.wedged() is None


def test_nothing_to_do_is_not_a_wedge():
    progress, _, clock, registry = watchdog(60)
    for _ in range(5):
        progress.observe({0: (150, 150), 1: (None, 0)})
        clock.now += 100
    progress.observe({})  # no partition assigned (more replicas than partitions)
    clock.now += 100
    assert progress.wedged() is None and gauge(registry) == 0


def test_time_stalled_on_an_outage_does_not_count():
    progress, stall, clock, _ = watchdog(60)
    progress.observe({0: (100, 150)})
    clock.now += 30
    stall.failed("batch", "store_unavailable", "Redis unavailable")
    for _ in range(10):  # a long Redis outage: stalled, live, resumes by itself
        clock.now += 30
        progress.observe({0: (100, 150)})
        assert progress.wedged() is None and progress.seconds() == 0
    stall.ok("batch")
    progress.observe({0: (100, 150)})
    clock.now += 59
    assert progress.wedged() is None  # counted again from the end of the outage
    clock.now += 1
    assert progress.wedged() is not None


def test_a_group_that_never_committed_waits_from_its_first_input():
    progress, _, clock, _ = watchdog(10)
    progress.observe({0: (None, 5)})
    clock.now += 10
    assert progress.wedged() is not None


def test_timeout_zero_never_trips_but_keeps_the_gauge():
    progress, _, clock, registry = watchdog(0)
    progress.observe({0: (100, 150)})
    clock.now += 10_000
    assert progress.wedged() is None and gauge(registry) == 10_000


async def test_a_background_tick_that_never_returns_trips_it():
    """The idle-chunk close, the outbox and the lag refresh run as timers: one tick that never
    returns stopped its task and nothing else (lag 0, health 200). Now it is a wedge too."""
    import asyncio

    from services.runtime.background import Periodic

    progress, _, clock, registry = watchdog(60)
    m = stage_metrics("extract", CollectorRegistry())
    forever = asyncio.Event()

    async def tick() -> None:
        await forever.wait()

    idle = Periodic("idle_chunks", tick, m.task_failures, clock=clock)
    progress.watch(idle)
    running = asyncio.ensure_future(idle())
    await asyncio.sleep(0)
    clock.now += 59
    progress.observe({0: (40, 40)})  # no input waiting: only the tick counts
    assert progress.wedged() is None and gauge(registry) == 59
    clock.now += 1
    body = progress.wedged()
    assert body is not None and "one tick of idle_chunks running for 60s" in body["reason"]
    forever.set()
    assert await running
    assert progress.wedged() is None and gauge(registry) == 0  # between ticks: nothing runs
