"""Rate-limited logging, so an outage costs a few lines a minute, not megabytes.

- :class:`OutageLog`: our own outage messages (broker, Redis) — the first failure at once, then
  at most one line per ``every_s`` with the number held back, and one line when it recovers.
- :class:`Throttle`: when a repeated line may be written, for those two and the background
  timers (:mod:`services.runtime.background`).
- :class:`RepeatFilter`: a handler filter for the client libraries (aiokafka, faust, mode) that
  log every reconnect attempt: a warning or error with the same logger and message template
  passes at most once per ``every_s``, with the number held back appended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: Loggers whose repeated warnings :class:`RepeatFilter` holds back.
CHATTY = ("aiokafka", "kafka", "faust", "mode")


class Throttle:
    """When a repeated line may be written: the first at once, then at most one per
    ``every_s``; the lines held back in between are counted."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self._held_back = 0
        self._logged_at: float | None = None

    def due(self) -> int | None:
        """None when this line is to be held back; else the number held back before it (the
        caller writes the line now)."""
        now = self.clock()
        if self._logged_at is not None and now - self._logged_at < self.every_s:
            self._held_back += 1
            return None
        held, self._held_back, self._logged_at = self._held_back, 0, now
        return held

    def reset(self) -> None:
        """The repeats are over: the next line is written at once."""
        self._held_back = 0
        self._logged_at = None


class OutageLog:
    """Logs one kind of outage on ``log``: the first failure, then one per ``every_s``."""

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.what = what
        self.failing = 0
        self._throttle = Throttle(every_s, clock)

    def failed(self, error: object) -> None:
        self.failing += 1
        held = self._throttle.due()
        if held is None:
            return
        more = f" ({held} more not logged)" if held else ""
        self.log.warning("%s unavailable%s: %s", self.what, more, error)

    def ok(self) -> None:
        if self.failing:
            self.log.info("%s available again after %d failures", self.what, self.failing)
        self.failing = 0
        self._throttle.reset()


class RepeatFilter(logging.Filter):
    """Holds back repeats of a chatty library's warnings (same logger and template)."""

    def __init__(
        self,
        every_s: float = 30.0,
        prefixes: tuple[str, ...] = CHATTY,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1000,
    ) -> None:
        super().__init__()
        self.every_s = every_s
        self.prefixes = prefixes
        self.clock = clock
        self.max_keys = max_keys
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(self.prefixes):
            return True
        key = (record.name, str(record.msg))
        now = self.clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.every_s:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        if len(self._seen) >= self.max_keys:
            self._seen.clear()
        self._seen[key] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.msg} ({last[1]} similar messages not logged)"
        return True


def limit_repeats(every_s: float = 30.0) -> None:
    """Install one :class:`RepeatFilter` on every handler of the root logger (once)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(RepeatFilter(every_s))
