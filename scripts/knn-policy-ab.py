"""What each hybrid policy of the KNN costs the client, for calibrating
``gaama.store.index_layout.hybrid_policy``: the synthetic tenants of ``python -m benchmarks
query`` (``benchmarks.inprocess``) loaded into one index, then the KNN of one tenant run with
each policy forced, at each k, over the same query vectors (encoded before the clock starts).

    PYTHONPATH=shared:. python scripts/knn-policy-ab.py [tenant] [others] [k,k,...] [redis-url]

Loads a tenant of ``tenant`` nodes (default 10,000) and one of ``others`` (default 100,000)
beside it, unless the Redis at the URL holds them already (without a URL it starts its own).
Prints the tenant's size, the store's size bound and the policy the store chooses at each k,
then the client's p50 per KNN call of each policy and k, in two rounds.
"""

from __future__ import annotations

import statistics
import sys
import time

from benchmarks import inprocess
from gaama.store import vectors
from gaama.store.index_layout import hybrid_policy

POLICIES = ("ADHOC_BF", "BATCHES")


async def measure(url: str, nodes: int, others: int, ks: list[int]) -> None:
    other = await inprocess.searches(url, "knn-ab", others, 1)
    loaded = await inprocess.searches(url, "knn-ab", nodes, 200)
    index, tenant = loaded.index, loaded.tenant
    size, bound = await index._size(tenant)
    chosen = {k: hybrid_policy(size, bound, k, max(index.ef_runtime, k)) for k in ks}
    print(f"tenant {size} nodes, store bound {bound} keys; the store chooses {chosen}")
    queries = [await loaded.retriever.embedder.embed([t]) for t in loaded.texts]
    for round_ in range(2):
        for policy in POLICIES:
            vectors.hybrid_policy = lambda *_, p=policy: p  # forced for this pass
            for k in ks:
                times = []
                for q in queries:
                    start = time.perf_counter()
                    await index.knn(tenant, q[0], k, fields=("text",))
                    times.append(time.perf_counter() - start)
                p50 = statistics.median(times) * 1e3
                print(f"round {round_} {policy:8} k={k:3} p50 {p50:.2f} ms")
    vectors.hybrid_policy = hybrid_policy
    await loaded.client.aclose()
    await other.client.aclose()


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    others = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    ks = [int(k) for k in sys.argv[3].split(",")] if len(sys.argv) > 3 else [40, 50, 80]
    url = sys.argv[4] if len(sys.argv) > 4 else None
    inprocess.run(lambda redis_url: measure(redis_url, nodes, others, ks), url)


if __name__ == "__main__":
    main()
