"""How busy a service's event loop is, as Prometheus sees it.

Everything a service does in Python runs on one event loop, in one thread: the query service's
request handling, parsing of Redis replies, the walk and the scoring, and a consumer's batches.
When that thread is busy all the time, requests queue for it, and the pod's CPU can still look
below its limit: the embedding's onnxruntime threads run beside the loop, so a saturated loop
leaves the other cores partly idle (docs/decisions/0019-query-process-bound-by-its-event-loop.md).

:class:`LoopMonitor` runs on the loop as a task of its own. Every ``interval_s`` it asks the loop
to wake it, and it records:

- ``gaama_<service>_event_loop_lag_seconds``: how late the wake-up came. Every request waiting
  for the loop waits about that long.
- ``gaama_<service>_event_loop_cpu_seconds_total``: the CPU time of the loop's thread.
  ``rate()`` of it is the share of time the loop was busy (1.0: saturated).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gaama.metrics import LoopMetrics

log = logging.getLogger("gaama.runtime")


class LoopMonitor:
    """Samples the event loop it runs on (:meth:`run`, a task on that loop)."""

    def __init__(
        self,
        metrics: LoopMetrics,
        interval_s: float = 0.5,
        *,
        clock: Callable[[], float] = time.perf_counter,
        thread_cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.metrics = metrics
        self.interval_s = interval_s
        self.clock = clock
        self.thread_cpu = thread_cpu

    async def run(self) -> None:
        """Sample until cancelled. Called on the loop's own thread, so ``thread_cpu`` is the
        loop's. A failed sample is logged and the next one is tried: the monitor never stops
        the service."""
        cpu = self.thread_cpu()
        while True:
            due = self.clock() + self.interval_s
            await asyncio.sleep(self.interval_s)
            try:
                self.metrics.lag.observe(max(0.0, self.clock() - due))
                now = self.thread_cpu()
                self.metrics.cpu.inc(max(0.0, now - cpu))
                cpu = now
            except Exception:  # a metrics error must not end the service
                log.exception("event loop monitor: a sample failed")

    def start(self) -> asyncio.Task[None]:
        """:meth:`run` as a task on the running loop; the caller cancels it at shutdown."""
        return asyncio.get_running_loop().create_task(self.run(), name="event-loop-monitor")
