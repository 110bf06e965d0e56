"""Where a c=1 search's wall time goes: searches run one at a time in-process against a
synthetic tenant (``benchmarks.synthetic``, as ``python -m benchmarks query`` loads it) on a
Redis of its own, the query vectors encoded before the clock starts (no embed stage).

    [PIN=1|URL=redis://...] PYTHONPATH=shared:. python scripts/query-critical-path.py \
        [nodes] [searches] [modes]

Each store call a search awaits is timed from the search's start (when it was called, when it
returned): the median of each over the searches, so which calls run side by side and which one
after another reads off the table, and what the service spends between them is the gap. Redis's
own time per command kind comes from ``INFO commandstats`` over the same searches.

With ``URL`` set the Redis there is used and the tenant loaded only if it is not there yet, so
two checkouts can be compared in turns on one load (``python -m gaama.devstack`` or any Redis
with the Query Engine; the script's keys carry the prefix ``path``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from benchmarks import inprocess
from gaama.devstack import processes

#: The store calls timed: (owner, method); a version of the code lacking one times the rest.
TRACED = (
    ("index", "knn"),
    ("index", "lexical"),
    ("index", "_text_version"),
    ("index", "_execute_all"),
    ("index", "_hashes_fields"),
    ("index", "_hashes_field"),
    ("index", "_size"),
    ("index", "latest_time"),
    ("reads", "version"),
    ("reads", "checked"),
    ("reads", "texts"),
    ("graph", "expand"),
    ("graph", "provenance"),
)


class Trace:
    """(name, start ms, end ms) of every traced call since :meth:`begin`."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.calls: list[tuple[str, float, float]] = []

    def begin(self) -> None:
        self.t0 = time.perf_counter()
        self.calls = []

    def wrap(self, name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def traced(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.calls.append((name, (start - self.t0) * 1e3, (end - self.t0) * 1e3))

        return traced


def numbered(calls: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """A call's name with its order among the calls of that name in one search (``#2``...)."""
    seen: dict[str, int] = {}
    out = []
    for name, start, end in sorted(calls, key=lambda c: c[1]):
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", start, end))
    return out


async def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    info = await client.info("commandstats")
    return {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for k, v in info.items()}


async def probe(url: str, nodes: int, searches: int, modes: list[str]) -> None:
    loaded = await inprocess.searches(url, "path", nodes, searches)  # a Redis given may hold it
    client, index, graph, retriever = loaded.client, loaded.index, loaded.graph, loaded.retriever
    tenant, texts = loaded.tenant, loaded.texts
    trace = Trace()
    try:  # the full-text search's reads, made per search (where this version has them)
        from gaama.store.text_reads import TextReads

        reads: object = TextReads
    except ImportError:
        reads = None
    for owner, method in TRACED:
        target = {"index": index, "graph": graph, "reads": reads}[owner]
        if target is not None and hasattr(target, method):
            setattr(target, method, trace.wrap(method, getattr(target, method)))
    for text in texts[:20]:
        await retriever.search(tenant, text)
    print(f"{nodes:,} nodes, {searches} searches per mode, one at a time, no embed stage")
    for mode in modes:
        rows: dict[str, list[tuple[float, float]]] = {}
        walls, stages = [], {}
        before = await commandstats(client)
        for text in texts:
            trace.begin()
            result = await retriever.search(tenant, text, mode=mode)  # type: ignore[arg-type]
            walls.append((time.perf_counter() - trace.t0) * 1e3)
            for name, start, end in numbered(trace.calls):
                rows.setdefault(name, []).append((start, end))
            for stage, ms in result.timings_ms.items():
                stages.setdefault(stage, []).append(ms)
        after = await commandstats(client)
        print(
            f"\n{mode}: wall p50 {np.median(walls):.2f} ms; stage p50s "
            + ", ".join(f"{s} {np.median(v):.2f}" for s, v in stages.items() if np.median(v) > 0)
        )
        print(f"  {'call':28s} {'calls':>6s} {'start':>7s} {'end':>7s} {'took':>7s}  (ms, p50)")
        for name, spans in sorted(rows.items(), key=lambda r: np.median([s for s, _ in r[1]])):
            starts = [s for s, _ in spans]
            ends = [e for _, e in spans]
            took = [e - s for s, e in spans]
            print(
                f"  {name:28s} {len(spans) / searches:6.2f} {np.median(starts):7.2f} "
                f"{np.median(ends):7.2f} {np.median(took):7.2f}"
            )
        print("  Redis, per search: command, calls, usec")
        for cmd, (calls, usec) in sorted(after.items(), key=lambda kv: -kv[1][1]):
            c0, u0 = before.get(cmd, (0, 0))
            if calls - c0 and cmd not in ("info",):
                print(f"    {cmd:24s} {(calls - c0) / searches:6.2f} {(usec - u0) / searches:8.0f}")
    await client.aclose()


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    searches = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["gaama", "semantic"]
    # With PIN=1, Redis (started from here, so inheriting this process's CPUs) runs on the
    # second CPU and this process on the first: neither waits for the other's time slice.
    pin = os.environ.get("PIN") == "1"
    if url := os.environ.get("URL"):  # a Redis kept between runs: two checkouts, one load
        asyncio.run(probe(url, nodes, searches, modes))
        return
    if pin:
        os.sched_setaffinity(0, {1})
    with processes.temporary_redis("gaama-path-") as url:
        if pin:
            os.sched_setaffinity(0, {0})
        asyncio.run(probe(url, nodes, searches, modes))


if __name__ == "__main__":
    main()
