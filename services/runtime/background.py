"""Background tasks (faust timers) that survive any failure of one tick.

faust stops the whole worker when a timer raises ("Crashed reason=..."), so a Redis pause during
a tick (the extract service's idle-chunk timer, say) would end the service. A :class:`Periodic`
runs one tick, and when it fails it counts the failure in
``gaama_<service>_task_failures_total{task, reason}``, logs it (the first failure at once, then
at most once per ``log_every_s`` with the number held back), reports an outage to the stage's
:class:`Stall`, and returns: the next tick tries again. Work a failed tick left undone stays in
Redis (an open chunk stays open), so nothing is lost by waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaError
from prometheus_client import Counter
from redis.exceptions import RedisError

from gaama.errors import GaamaError
from gaama.store.errors import is_outage
from services.runtime.logs import Throttle
from services.runtime.stall import Stall

log = logging.getLogger("gaama.runtime")


def failure_reason(exc: BaseException) -> str:
    """The ``reason`` label of a failed tick."""
    if isinstance(exc, GaamaError):
        return exc.reason
    if isinstance(exc, RedisError) and is_outage(exc):
        return "store_unavailable"
    if isinstance(exc, KafkaError):
        return "broker_unavailable"
    return "error"


class Periodic:
    """One tick of the background task ``name``; never raises (except on cancellation)."""

    def __init__(
        self,
        name: str,
        tick: Callable[[], Awaitable[None]],
        failures: Counter,
        *,
        log_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        stall: Stall | None = None,
    ) -> None:
        self.name = name
        self.stall = stall
        self.tick = tick
        self.failures = failures
        self.failing = 0  # consecutive failed ticks
        self.clock = clock
        self._started: float | None = None  # when the tick in progress began
        self._throttle = Throttle(log_every_s, clock)

    def running_s(self) -> float:
        """How long the tick in progress has run (0 between ticks): the no-progress watchdog
        reads it, since a tick that never returns stops its task and nothing else."""
        return 0.0 if self._started is None else max(0.0, self.clock() - self._started)

    async def __call__(self) -> bool:
        """Run one tick; True when it succeeded."""
        self._started = self.clock()
        try:
            await self.tick()
        # A timer that raises stops the worker for good, so every failure is caught here — and
        # counted and logged, not swallowed. CancelledError (shutdown) is not an Exception.
        except Exception as exc:  # noqa: BLE001 - counted and logged below
            self._failed(exc)
            return False
        finally:
            self._started = None
        if self.stall is not None:
            self.stall.ok(self.name)
        if self.failing:
            log.info("%s recovered after %d failed ticks", self.name, self.failing)
        self.failing = 0
        self._throttle.reset()
        return True

    def _failed(self, exc: Exception) -> None:
        reason = failure_reason(exc)
        self.failures.labels(self.name, reason).inc()
        if self.stall is not None and reason != "error":  # an outage: waiting, not broken
            self.stall.failed(self.name, reason, exc)
        self.failing += 1
        held = self._throttle.due()
        if held is None:
            return
        more = f" ({held} similar failures not logged)" if held else ""
        if reason == "error":  # not an outage: the traceback is needed to find the bug
            log.error("%s failed, retrying next tick%s", self.name, more, exc_info=exc)
        else:
            log.warning("%s failed (%s), retrying next tick%s: %s", self.name, reason, more, exc)
