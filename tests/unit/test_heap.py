"""The services' garbage-collector settings (services/runtime/heap.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from gaama.config import load_settings
from gaama.errors import ConfigError
from gaama.metrics import gc_pause_metric
from services.runtime import heap
from services.runtime.heap import settle_heap


@pytest.fixture
def collector() -> Iterator[None]:
    """Python's own collector settings, restored after the test."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    for callback in heap._installed:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)


def test_settle_heap_freezes_the_start_up_objects_and_raises_the_young_threshold(
    collector: None,
) -> None:
    gc.set_threshold(700, 10, 10)
    kept = [{"start-up": i} for i in range(1000)]  # objects alive at start-up
    settle_heap(load_settings(gc_gen0_threshold=40_000))
    assert gc.get_threshold() == (40_000, 10, 10)
    assert gc.get_freeze_count() >= len(kept)
    # a collection after it scans none of them, and a cycle made afterwards is still collected
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1


def test_settle_heap_can_leave_python_s_defaults(collector: None) -> None:
    gc.set_threshold(700, 10, 10)
    settle_heap(load_settings(gc_freeze=False, gc_gen0_threshold=0))
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_negative_threshold_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="GAAMA_GC_GEN0_THRESHOLD"):
        load_settings(gc_gen0_threshold=-1)


def test_each_collection_is_observed_by_generation_once(collector: None) -> None:
    first, registry = CollectorRegistry(), CollectorRegistry()
    settle_heap(load_settings(), gc_pause_metric("query", first))
    # a second start-up in the same process replaces the watch instead of adding one
    settle_heap(load_settings(), gc_pause_metric("query", registry))

    def counts(reg: CollectorRegistry) -> list[float]:
        name = "gaama_query_gc_pause_seconds_count"
        return [reg.get_sample_value(name, {"generation": g}) or 0.0 for g in "012"]

    before, first_before = counts(registry), counts(first)
    gc.collect(0)
    gc.collect(2)
    assert [n - b for n, b in zip(counts(registry), before, strict=True)] == [1, 0, 1]
    assert counts(first) == first_before
    total = registry.get_sample_value("gaama_query_gc_pause_seconds_sum", {"generation": "2"})
    assert total is not None and total > 0
