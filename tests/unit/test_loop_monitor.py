"""The event-loop monitor (services/runtime/loop_monitor.py) on a real asyncio loop: a blocked
loop shows as lag, a busy one as CPU of its thread, an idle one as neither; a failed sample does
not stop it, and cancelling it does."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from gaama.metrics import LoopMetrics, loop_metrics
from services.runtime.loop_monitor import LoopMonitor


def sample(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(name)
    assert value is not None, name
    return value


async def settle(monitor: LoopMonitor) -> None:
    """Let the monitor take a few idle samples before the test measures."""
    await asyncio.sleep(monitor.interval_s * 3)


def spin(cpu_seconds: float) -> None:
    """Compute on this thread until it has used ``cpu_seconds`` of CPU (however loaded the
    machine, the thread's own CPU time is what the monitor counts)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


async def test_a_blocked_loop_shows_as_lag_and_a_busy_one_as_cpu() -> None:
    registry = CollectorRegistry()
    monitor = LoopMonitor(loop_metrics("query", registry), interval_s=0.05)
    task = monitor.start()
    try:
        await settle(monitor)
        lag = "gaama_query_event_loop_lag_seconds_sum"
        cpu = "gaama_query_event_loop_cpu_seconds_total"
        # Idle: the loop waits in its selector, using no CPU and firing timers on time.
        lag0, cpu0 = sample(registry, lag), sample(registry, cpu)
        await asyncio.sleep(0.3)
        assert sample(registry, cpu) - cpu0 < 0.1
        assert sample(registry, lag) - lag0 < 0.1
        # Blocked without CPU (a synchronous wait on the loop's thread): lag, no CPU.
        lag0, cpu0 = sample(registry, lag), sample(registry, cpu)
        time.sleep(0.3)
        await asyncio.sleep(0.1)
        assert sample(registry, lag) - lag0 >= 0.2
        assert sample(registry, cpu) - cpu0 < 0.1
        # Busy computing on the loop's thread: its CPU time counts.
        lag0, cpu0 = sample(registry, lag), sample(registry, cpu)
        spin(0.3)
        await asyncio.sleep(0.1)
        assert sample(registry, cpu) - cpu0 >= 0.25
        assert sample(registry, lag) - lag0 >= 0.2
        assert sample(registry, "gaama_query_event_loop_lag_seconds_count") >= 10
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


class FlakyHistogram:
    """A lag histogram whose first observation fails."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def observe(self, value: float) -> None:
        self.values.append(value)
        if len(self.values) == 1:
            raise RuntimeError("metrics backend broke")


async def test_a_failed_sample_is_logged_and_the_next_one_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    flaky = FlakyHistogram()
    metrics = LoopMetrics(lag=flaky, cpu=loop_metrics("mcp", registry).cpu)  # type: ignore[arg-type]
    task = LoopMonitor(metrics, interval_s=0.01).start()
    try:
        await asyncio.sleep(0.2)
        assert len(flaky.values) >= 3
        assert not task.done()
        assert "event loop monitor: a sample failed" in caplog.text
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert task.cancelled()


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        LoopMonitor(loop_metrics("ingest", CollectorRegistry()), interval_s=0)
