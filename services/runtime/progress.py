"""Whether a consumer stage is wedged: it has input waiting, is not stalled on a known outage, and
has committed none of it for ``GAAMA_PROGRESS_TIMEOUT_S``.

A stalled stage (:mod:`services.runtime.stall`) knows what it waits for and resumes by itself, so
it stays live. A wedged one does not know: a task that never returns, a lost wake-up, a bug. It
can only be restarted, and it says so: ``/healthz`` and ``/readyz`` answer 503 with
``"status": "no_progress"`` (Kubernetes' liveness probe then restarts the pod, which resumes from
the committed offsets), and ``gaama_<service>_no_progress_seconds`` says for how long.

Progress is read where it shows: the group's committed offsets of the partitions this replica
owns. Input waits when a partition's high-water mark is above its committed offset. Time without
input, stalled on an outage, or right after a commit does not count. The stage's background
tasks (the idle-chunk close, the outbox, the lag refresh) are watched too: one tick running for
the timeout is a wedge as well, since it stops its task and nothing else (the lag stays 0).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

from prometheus_client import Gauge

from services.runtime.stall import Stall

log = logging.getLogger("gaama.runtime")

#: Per owned partition: the group's committed offset (None before the first commit) and the
#: high-water mark as far as this replica knows it.
Backlog = Mapping[int, tuple[int | None, int]]


class Task(Protocol):
    """A background task as the watchdog sees it (`services.runtime.background.Periodic`)."""

    name: str

    def running_s(self) -> float: ...


class Progress:
    """The no-progress watchdog of one consumer stage.

    Args:
        timeout_s: Seconds without a commit, input waiting, before the stage reports not live
            (0: never; the gauge is still kept).
        stall: The stage's outage state: time stalled does not count.
        gauge: ``no_progress_seconds`` (None: no metric); read at scrape time.
        clock: Monotonic seconds.
        wall: Seconds since the epoch (for the ``since`` the health pages show).
    """

    def __init__(
        self,
        timeout_s: float,
        stall: Stall,
        gauge: Gauge | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.timeout_s = timeout_s
        self.stall = stall
        self.clock = clock
        self.wall = wall
        self._since: float | None = None  # when the current wait without progress began
        self._committed: dict[int, int | None] = {}
        self._reported = False
        self._tasks: list[Task] = []
        if gauge is not None:
            gauge.set_function(self.seconds)

    def observe(self, backlog: Backlog) -> None:
        """Take the owned partitions' committed offsets and high-water marks now."""
        now = self.clock()
        committed = {p: c for p, (c, _) in backlog.items()}
        waiting = any(high > (c or 0) for c, high in backlog.values())
        if not waiting or self.stall.current() is not None:
            self._since = None
        elif self._since is None or committed != self._committed:
            self._since = now  # waiting from now on, or something was committed just now
        self._committed = committed
        wedged = self.wedged()
        if wedged is not None and not self._reported:
            log.error(
                "no progress: %s; reporting not live so that the process is restarted",
                wedged["reason"],
            )
        self._reported = wedged is not None

    def watch(self, *tasks: Task) -> None:
        """Count a tick of any of ``tasks`` that runs for the timeout as a wedge."""
        self._tasks += tasks

    def _input_s(self) -> float:
        return 0.0 if self._since is None else max(0.0, self.clock() - self._since)

    def seconds(self) -> float:
        """How long input has waited without a commit, or a background task's tick has run,
        whichever is longer (0 when neither)."""
        return max([self._input_s(), *(t.running_s() for t in self._tasks)])

    def wedged(self) -> dict[str, str] | None:
        """The health pages' body when the wait has passed the timeout; else None."""
        if self.timeout_s <= 0:
            return None
        waited = self._input_s()
        what = f"input waiting and nothing committed for {waited:.0f}s"
        for task in self._tasks:
            if (running := task.running_s()) > waited:
                waited, what = running, f"one tick of {task.name} running for {running:.0f}s"
        if waited < self.timeout_s:
            return None
        since = datetime.fromtimestamp(self.wall() - waited, UTC)
        return {
            "status": "no_progress",
            "reason": f"{what} (GAAMA_PROGRESS_TIMEOUT_S={self.timeout_s:g})",
            "since": since.isoformat(timespec="seconds"),
        }
