"""What ``gaama`` costs over ``semantic`` in the searching thread, for comparing two versions of
the code: searches run in-process over a synthetic tenant (``benchmarks.inprocess``: the query
vectors encoded before the clock starts, so no embed stage), the two modes alternating search
by search so that drift of a shared machine falls on both alike.

    PYTHONPATH=shared:. python scripts/mode-cost-ab.py [nodes] [searches] [passes] [redis-url]

Prints the thread CPU milliseconds per search of each mode, their difference and ratio, and the
p50 of each mode's wall time per search (one search at a time: the c=1 view). The process runs
the services' garbage-collector settings (``services/runtime/heap.py``). Without a Redis URL it
starts its own; with one (the same for both versions) the tenant is loaded once and reused. To
compare two commits, check each out (``git worktree add``) and run this script from each in
turns, A B B A.
"""

from __future__ import annotations

import statistics
import sys
import time

from benchmarks import inprocess
from gaama.config import load_settings
from services.runtime.heap import settle_heap

MODES = ("gaama", "semantic")


async def measure(url: str, nodes: int, searches: int, passes: int) -> None:
    loaded = await inprocess.searches(url, "mode-ab", nodes, searches)
    retriever, tenant, texts = loaded.retriever, loaded.tenant, loaded.texts
    settle_heap(load_settings())  # the services' collector settings
    for text in texts[:50]:  # warm-up: scripts loaded, caches filled
        for mode in MODES:
            await retriever.search(tenant, text, mode=mode)
    cpu = dict.fromkeys(MODES, 0.0)
    wall: dict[str, list[float]] = {m: [] for m in MODES}
    for p in range(passes):
        for i, text in enumerate(texts):
            for mode in MODES if (i + p) % 2 == 0 else MODES[::-1]:
                c, w = time.thread_time(), time.perf_counter()
                await retriever.search(tenant, text, mode=mode)
                cpu[mode] += time.thread_time() - c
                wall[mode].append(time.perf_counter() - w)
    n = searches * passes
    g, s = (cpu[m] * 1000 / n for m in MODES)
    wg, ws = (statistics.median(wall[m]) * 1000 for m in MODES)
    print(
        f"cpu ms/search gaama {g:.2f} semantic {s:.2f} diff {g - s:.2f} ratio {g / s:.3f} | "
        f"wall p50 ms gaama {wg:.2f} semantic {ws:.2f} ratio {wg / ws:.3f}"
    )
    await loaded.client.aclose()


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    searches = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    url = sys.argv[4] if len(sys.argv) > 4 else None
    inprocess.run(lambda redis_url: measure(redis_url, nodes, searches, passes), url)


if __name__ == "__main__":
    main()
