"""Python's cyclic garbage collector, set for a long-running service once it has started.

CPython's collector scans every container object it tracks; a full (oldest-generation)
collection scans all of them. A service's heap is mostly what it built at start-up — libraries,
the FastAPI app, the embedding model and its tokenizer — and none of it is ever garbage. Each full
collection of that heap took about 100 ms of the event loop's thread in the query service (five
or six per 600 searches at c=16), a pause every request in flight waits out, and the young
collections ran every 700 net allocations, a few per search. Both together cost about 1 ms of
CPU per search (docs/benchmarks.md, "Garbage collection").

After start-up the service calls :func:`settle_heap`: one collection, then ``gc.freeze()`` moves
every surviving object to a permanent generation that no collection scans; the youngest
generation's threshold is raised so that collections come when cyclic garbage has piled up, not
every few hundred allocations. Objects that die by reference counting (nearly all of a request's)
are freed at once either way; only reference cycles wait for a collection, which still runs.
"""

from __future__ import annotations

import gc
import logging

from gaama.config import Settings

log = logging.getLogger("gaama.runtime")


def settle_heap(settings: Settings) -> None:
    """Freeze the start-up heap out of the collector's scans and set the youngest generation's
    threshold (``GAAMA_GC_FREEZE``, ``GAAMA_GC_GEN0_THRESHOLD``)."""
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
