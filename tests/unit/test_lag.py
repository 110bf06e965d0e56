"""Consumer lag arithmetic and the gauge it sets (no broker: a stand-in for faust's consumer)."""

from __future__ import annotations

from faust.exceptions import ConsumerNotStarted
from faust.types import TP
from prometheus_client import CollectorRegistry

from gaama.metrics import stage_metrics
from services.runtime.lag import LagMonitor, partition_lag


def test_lag_is_high_water_minus_committed():
    assert partition_lag(end=120, seen=None, committed=100, start=0) == 20
    assert partition_lag(end=120, seen=119, committed=120, start=0) == 0


def test_a_group_with_nothing_committed_starts_at_the_log_start():
    assert partition_lag(end=50, seen=None, committed=None, start=0) == 50
    assert partition_lag(end=50, seen=None, committed=None, start=10) == 40


def test_an_end_offset_reported_short_never_gives_negative_lag():
    """Tansu reported 1,556 for a partition holding 1,576 records (ARCHITECTURE.md §3)."""
    # committed past the reported end: 0, not -20
    assert partition_lag(end=1556, seen=1575, committed=1576, start=0) == 0
    # records read but not committed still count, even beyond the reported end
    assert partition_lag(end=1556, seen=1575, committed=1500, start=0) == 76
    assert partition_lag(end=None, seen=None, committed=5, start=0) == 0


class FakeConsumer:
    """The part of faust's consumer LagMonitor reads."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.owned: set[TP] | None = None
        self.ends: dict[TP, int] = {}
        self._committed_offset: dict[TP, int | None] = {}
        self._read_offset: dict[TP, int | None] = {}

    def assignment(self) -> set[TP]:
        if self.owned is None:
            raise ConsumerNotStarted("not yet")
        return self.owned

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        return {tp: self.ends[tp] for tp in tps}

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 0)

    def highwater(self, tp: TP) -> int | None:
        return None


class FakeApp:
    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer


async def test_monitor_sets_owned_partitions_and_zeroes_the_others():
    registry = CollectorRegistry()
    m = stage_metrics("ingest", registry)
    topic = "p.gaama.turns.v1"
    consumer = FakeConsumer(topic)
    lag = LagMonitor(FakeApp(consumer), topic, 4, m.lag)

    def value(p: int) -> float | None:
        return registry.get_sample_value(
            "gaama_ingest_consumer_lag", {"topic": topic, "partition": str(p)}
        )

    assert [value(p) for p in range(4)] == [0, 0, 0, 0]  # series exist before any assignment
    assert await lag.refresh() == {}  # consumer not started yet: nothing owned, no error
    tp0, tp1 = TP(topic, 0), TP(topic, 1)
    consumer.owned = {tp0, tp1, TP("other", 0)}
    consumer.ends = {tp0: 30, tp1: 8}  # tp1's end reported short
    consumer._committed_offset = {tp0: 10, tp1: None}
    lag.saw(1, 11)  # this consumer has read offset 11 of partition 1
    assert await lag.refresh() == {0: 20, 1: 12}
    assert [value(p) for p in range(4)] == [20, 12, 0, 0]
    consumer.owned = {tp1}  # partition 0 moved to another replica: it reports it now
    consumer._committed_offset = {tp1: 12}
    assert await lag.refresh() == {1: 0}
    assert [value(p) for p in range(4)] == [0, 0, 0, 0]
