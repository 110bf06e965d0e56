"""Graceful shutdown of a consumer: SIGTERM finishes the batch in hand or abandons it, commits only
what was written, and the process is gone within ``GAAMA_SHUTDOWN_GRACE_S``.

The grace is the time Kubernetes gives a pod between SIGTERM and SIGKILL
(``terminationGracePeriodSeconds``; the manifests set both to the same value). It is split:

- the in-flight batch may run until :meth:`Drain.batch_deadline`, the grace minus a reserve for
  faust's own stop (leave the group, commit, close the producer);
- a batch still running then is *abandoned*: cancelled, its offsets never acknowledged, so the
  next owner of the partition processes it again (idempotent writes: no duplicates);
- a batch that arrives after SIGTERM is abandoned the same way, unstarted;
- a watchdog thread ends the process at the grace's end should faust's stop hang (the broker
  gone, say): what was committed stays committed, the rest is delivered again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("gaama.runtime")

#: Exit status when the watchdog has to end a shutdown that did not finish in the grace.
EXIT_SHUTDOWN_OVERRUN = 3


def stop_reserve(grace_s: float) -> float:
    """The part of the grace kept for stopping after the last batch: a quarter, 5 to 15 s
    (room for faust's own stop — leave the group, commit, close the producer — and then the
    interpreter's exit)."""
    return min(15.0, max(5.0, grace_s / 4))


def start_watchdog(grace_s: float) -> threading.Timer:
    """End the process ``grace_s`` from now unless it has exited by then."""

    def overrun() -> None:
        log.error(
            "shutdown still running %.0fs after SIGTERM (GAAMA_SHUTDOWN_GRACE_S); exiting now: "
            "what was not committed is delivered again",
            grace_s,
        )
        logging.shutdown()
        os._exit(EXIT_SHUTDOWN_OVERRUN)

    watchdog = threading.Timer(grace_s, overrun)
    watchdog.daemon = True
    watchdog.start()
    return watchdog


class Drain:
    """The batches a consumer has in flight, and the shutdown plan once SIGTERM came.

    Args:
        grace_s: Seconds from SIGTERM to the end of the process.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = grace_s
        self.clock = clock
        self.began_at: float | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._abandoned: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Event | None = None  # made on the loop that uses it

    @property
    def stopping(self) -> bool:
        return self.began_at is not None

    def batch_deadline(self) -> float | None:
        """When an in-flight batch is abandoned (clock seconds); None before SIGTERM."""
        if self.began_at is None:
            return None
        return self.began_at + self.grace_s - stop_reserve(self.grace_s)

    def begin(self) -> None:
        """SIGTERM: take no new batch."""
        if self.began_at is not None:
            return
        self.began_at = self.clock()
        log.info(
            "shutting down: finishing the batch in hand (up to %.1fs), then committing",
            self.grace_s - stop_reserve(self.grace_s),
        )

    def _event(self) -> asyncio.Event:
        if self._idle is None:
            self._idle = asyncio.Event()
            if not self._batches:
                self._idle.set()
        return self._idle

    def _start(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        idle = self._event()
        task = asyncio.ensure_future(work)
        self._batches.add(task)
        idle.clear()
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._batches.discard(task)
        if not self._batches:
            self._event().set()

    async def run(self, work: Coroutine[Any, Any, None]) -> bool:
        """Run one batch's ``work``; False when it was abandoned, started or not, and must not
        be acknowledged. Cancelling the caller cancels the work too."""
        if self.stopping:
            work.close()
            return False
        return await self._outcome(self._start(work))

    def follow(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[bool]:
        """Run the rest of a batch that :meth:`run` admitted (its fsync wait, publication and
        acknowledgement, while the next batch is handled) as a task of its own, in flight like
        :meth:`run`'s work: :meth:`settle` waits for it, or abandons it at the deadline. It is
        in flight from this call on, and starts even once shutdown has begun (its batch was
        taken before). The task's result is False when the work was abandoned."""
        task = self._start(work)
        outcome = asyncio.ensure_future(self._outcome(task))
        # Cancelling the outcome cancels the work, even before the outcome has begun to wait.
        outcome.add_done_callback(lambda o: task.cancel() if o.cancelled() else None)
        return outcome

    async def _outcome(self, task: asyncio.Task[None]) -> bool:
        try:
            await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if task in self._abandoned and not (me is not None and me.cancelling()):
                return False
            raise
        finally:
            self._abandoned.discard(task)
        return True

    async def settle(self) -> bool:
        """Wait until no batch is in flight, or abandon (cancel) those still running at the
        batch deadline; True when none had to be."""
        deadline = self.batch_deadline()
        wait = None if deadline is None else max(0.0, deadline - self.clock())
        try:
            await asyncio.wait_for(self._event().wait(), wait)
        except TimeoutError:
            running = set(self._batches)
            for task in running:
                self._abandoned.add(task)
                task.cancel()
            # let the batch's own clean-up (lock releases) run before faust stops the rest
            await asyncio.wait(running, timeout=stop_reserve(self.grace_s) / 2)
            log.warning(
                "the batch in hand did not finish in %.1fs; abandoning it (delivered again "
                "after the restart)",
                self.grace_s - stop_reserve(self.grace_s),
            )
            return False
        return True
