"""Consumer lag per topic/partition: ``gaama_<service>_consumer_lag{topic, partition}``.

Lag is what the consumer group still has to commit: the partition's high-water mark (the offset
the next record produced will get) minus the group's committed offset (the next record to
process). A background task refreshes it every ``GAAMA_LAG_INTERVAL_S`` for the partitions this
replica owns, with one ListOffsets request; partitions owned by another replica are 0 here (that
replica reports them), so ``sum`` and ``max by (topic, partition)`` over replicas both hold.

The high-water mark is the largest of what ListOffsets reports, what the last fetch reported and
the highest offset this consumer has read + 1: the dev broker (Tansu) can report end offsets short
(ARCHITECTURE.md §3), which would otherwise give a negative lag, or hide records already read.
Lag is never negative.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from faust.exceptions import ConsumerNotStarted
from faust.types import TP
from prometheus_client import Gauge

log = logging.getLogger("gaama.runtime")


def partition_lag(
    *, end: int | None, seen: int | None, committed: int | None, start: int | None
) -> int:
    """Records of one partition the group has not committed yet.

    Args:
        end: the high-water mark the broker reported (None if unknown).
        seen: the highest offset this consumer has read (None if none yet).
        committed: the group's committed offset, i.e. the next offset to process (None when the
            group has committed nothing for the partition).
        start: the partition's first offset; where a group with nothing committed starts
            (``auto_offset_reset=earliest``).

    Returns:
        ``max(end, seen + 1) - committed``, at least 0.
    """
    high = max(end or 0, seen + 1 if seen is not None else 0)
    base = committed if committed is not None else (start or 0)
    return max(0, high - base)


class LagMonitor:
    """Keeps the lag gauge of one consumed topic up to date from a faust app's consumer."""

    def __init__(
        self, app: Any, topic: str, partitions: int, gauge: Gauge, timeout_s: float = 10.0
    ) -> None:
        self.app = app
        self.topic = topic
        self.partitions = partitions
        self.gauge = gauge
        self.timeout_s = timeout_s
        self._seen: dict[int, int] = {}
        self._ends: dict[int, int] = {}  # the last high-water marks ListOffsets reported
        for p in range(partitions):  # every partition's series exists from the start, at 0
            gauge.labels(topic, str(p)).set(0)

    def saw(self, partition: int | None, offset: int | None) -> None:
        """Record that a record at ``offset`` was read (a lower bound for the high-water)."""
        if partition is not None and offset is not None and offset > self._seen.get(partition, -1):
            self._seen[partition] = offset

    def caught_up(self) -> bool:
        """Whether this replica has committed every record it knows of on the partitions it
        owns, from local state only (no request). False without an assignment or before the
        first fetch of an owned partition: a consumer still joining, or one that has not yet
        seen its partitions' ends, is not idle. A batch in flight (an outage being retried
        included) is uncommitted, so it is not idle either."""
        consumer = self.app.consumer
        try:
            owned = [tp for tp in consumer.assignment() if tp.topic == self.topic]
        except ConsumerNotStarted:
            return False
        if not owned:
            return False
        committed = getattr(consumer, "_committed_offset", {})
        for tp in owned:
            fetched = _fetched_highwater(consumer, tp)
            if fetched is None:
                return False
            seen = self._seen.get(tp.partition)
            high = max(fetched, seen + 1 if seen is not None else 0)
            done = committed.get(tp)
            if high > (done if done is not None else 0):
                return False
        return True

    def backlog(self) -> dict[int, tuple[int | None, int]]:
        """Per owned partition, the group's committed offset (None before the first commit)
        and the highest high-water mark known here (the last fetch, the last ListOffsets, the
        records read), from local state only (no request); empty without an assignment."""
        consumer = self.app.consumer
        try:
            owned = [tp for tp in consumer.assignment() if tp.topic == self.topic]
        except ConsumerNotStarted:
            return {}
        committed = getattr(consumer, "_committed_offset", {})
        out: dict[int, tuple[int | None, int]] = {}
        for tp in owned:
            seen = self._seen.get(tp.partition)
            high = max(
                _fetched_highwater(consumer, tp) or 0,
                self._ends.get(tp.partition, 0),
                seen + 1 if seen is not None else 0,
            )
            out[tp.partition] = (committed.get(tp), high)
        return out

    async def refresh(self) -> dict[int, int]:
        """Set the gauge for every partition of the topic; returns the lag of owned ones."""
        consumer = self.app.consumer
        try:
            owned = sorted(
                (tp for tp in consumer.assignment() if tp.topic == self.topic),
                key=lambda tp: tp.partition,
            )
        except ConsumerNotStarted:
            owned = []
        lags: dict[int, int] = {}
        if owned:
            # Bounded: Tansu's notes list ListOffsets hangs with some clients; a hung refresh
            # fails this tick (counted, retried) instead of blocking the next ones.
            ends = await asyncio.wait_for(consumer.highwaters(*owned), self.timeout_s)
            starts = await asyncio.wait_for(consumer.earliest_offsets(*owned), self.timeout_s)
            # faust keeps the group's committed offsets (loaded on assignment, updated on each
            # commit) in this map; it has no public accessor.
            committed = getattr(consumer, "_committed_offset", {})
            read = getattr(consumer, "_read_offset", {})
            for tp in owned:
                self._ends[tp.partition] = _int(ends.get(tp), 0)
                seen = max(self._seen.get(tp.partition, -1), _int(read.get(tp), -1))
                lags[tp.partition] = partition_lag(
                    end=max(_int(ends.get(tp), 0), _int(_fetched_highwater(consumer, tp), 0)),
                    seen=seen if seen >= 0 else None,
                    committed=committed.get(tp),
                    start=starts.get(tp),
                )
        for p in sorted({*range(self.partitions), *lags}):
            self.gauge.labels(self.topic, str(p)).set(lags.get(p, 0))
        return lags


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) else default


def _fetched_highwater(consumer: Any, tp: TP) -> int | None:
    """The high-water mark of the last fetch response, if any (no request)."""
    try:
        hw = consumer.highwater(tp)
    except (ConsumerNotStarted, AssertionError, KeyError):
        return None
    return hw if isinstance(hw, int) else None
