"""Python's cyclic garbage collector, set for a long-running service once it has started.

CPython's collector scans every container object it tracks; a full (oldest-generation)
collection scans all of them. A service's heap is mostly what it built at start-up — libraries,
the FastAPI app, the embedding model and its tokenizer — and none of it is ever garbage. Left at
CPython's defaults, every full collection scans all of it on the event loop's thread, a pause
every request in flight waits out, and a young collection runs every 700 net allocations, one or
more per search (docs/decisions/0017-gc-freeze.md).

After start-up the service calls :func:`settle_heap`: one collection, then ``gc.freeze()`` moves
every surviving object to a permanent generation that no collection scans; the youngest
generation's threshold is raised so that collections come when cyclic garbage has piled up, not
every few hundred allocations. Objects that die by reference counting (nearly all of a request's)
are freed at once either way; only reference cycles wait for a collection, which still runs.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from prometheus_client import Histogram

from gaama.config import Settings

log = logging.getLogger("gaama.runtime")

#: The collection callback installed by :func:`settle_heap` (one per process).
_installed: list[Any] = []


def settle_heap(settings: Settings, pauses: Histogram | None = None) -> None:
    """Freeze the start-up heap out of the collector's scans and set the youngest generation's
    threshold (``GAAMA_GC_FREEZE``, ``GAAMA_GC_GEN0_THRESHOLD``); with ``pauses``, every
    collection from now on is observed in it (``gaama_<service>_gc_pause_seconds``)."""
    if pauses is not None:
        watch_collections(pauses)
    if settings.gc_gen0_threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(settings.gc_gen0_threshold, older, oldest)
    if settings.gc_freeze:
        gc.collect()
        gc.freeze()
    log.info(
        "garbage collector: thresholds %s, %d start-up objects frozen",
        gc.get_threshold(),
        gc.get_freeze_count(),
    )


def watch_collections(pauses: Histogram) -> None:
    """Observe each garbage collection's duration in ``pauses`` by generation (replacing a watch
    installed before in this process)."""
    for callback in _installed:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
    # Children bound up front: the callback runs inside a collection and takes no metric's
    # parent lock.
    by_generation = [pauses.labels(str(g)) for g in range(3)]
    started = [0.0]

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif 0 <= info["generation"] < len(by_generation):
            by_generation[info["generation"]].observe(time.perf_counter() - started[0])

    gc.callbacks.append(on_collection)
    _installed[:] = [on_collection]
