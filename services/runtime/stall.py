"""Whether a consumer stage is stalled: it is retrying an outage (Redis or the broker away) and
makes no progress until it ends.

The runtime retries an outage without limit, so a stage never exits on one; this is what tells an
operator it is waiting. Each place that retries reports under its own ``source`` (the batch in
hand, a background task): the stage is stalled while any source is, since the earliest of them,
and ready again by itself once every source has succeeded once more. It shows in ``/healthz``
and ``/readyz`` (``"status": "stalled"`` with the reason and since when) and in
``gaama_<service>_stalled_since_timestamp_seconds{reason}`` (0 when not stalled).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import Gauge

from gaama.metrics import STALL_REASONS

log = logging.getLogger("gaama.runtime")


@dataclass(frozen=True)
class Stalled:
    """Why a stage is stalled and since when (seconds since the epoch)."""

    reason: str
    detail: str
    since: float

    def as_json(self) -> dict[str, str]:
        return {
            "status": "stalled",
            "reason": f"{self.reason}: {self.detail}",
            "since": datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds"),
        }


class Stall:
    """The outages a stage is retrying, by source.

    Args:
        gauge: ``stalled_since_timestamp_seconds`` labelled by reason (None: no metric).
        clock: Seconds since the epoch.
    """

    def __init__(self, gauge: Gauge | None = None, clock: Callable[[], float] = time.time) -> None:
        self.gauge = gauge
        self.clock = clock
        self._by_source: dict[str, Stalled] = {}

    def failed(self, source: str, reason: str, detail: object) -> None:
        """``source`` is retrying an outage of kind ``reason`` (``store_unavailable``...)."""
        known = self._by_source.get(source)
        since = known.since if known is not None and known.reason == reason else self.clock()
        if not self._by_source:
            log.warning("stalled (%s, %s): %s", source, reason, detail)
        self._by_source[source] = Stalled(reason, str(detail), since)
        self._export()

    def ok(self, source: str) -> None:
        """``source`` succeeded: its outage, if any, is over."""
        if self._by_source.pop(source, None) is None:
            return
        if not self._by_source:
            log.info("no longer stalled (%s succeeded)", source)
        self._export()

    def current(self) -> Stalled | None:
        """The oldest outage still retried; None when the stage makes progress."""
        return min(self._by_source.values(), key=lambda s: s.since, default=None)

    def _export(self) -> None:
        if self.gauge is None:
            return
        since: dict[str, float] = {}
        for s in self._by_source.values():
            since[s.reason] = min(since.get(s.reason, s.since), s.since)
        for reason in {*STALL_REASONS, *since}:
            self.gauge.labels(reason).set(since.get(reason, 0.0))
