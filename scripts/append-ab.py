"""Episode appends of one ingest batch: a script call per turn (``GraphStore.append_episode``)
against one MULTI/EXEC per tenant (``append_episodes``), in the order A B B A on one embedded
Redis (8 rounds of 256 turns over 4 tenants, random unit vectors). Prints the median ms per batch.

    PYTHONPATH=shared:. python scripts/append-ab.py
"""

import asyncio
import statistics
import time
import uuid
from datetime import UTC, datetime

import numpy as np

from benchmarks.ingest import Conv, _turns
from benchmarks.query import servers
from gaama.episodes import episode_node
from gaama.store import connect
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex


async def main(url: str) -> None:
    prefix = "gab" + uuid.uuid4().hex[:5]
    keys = Keys(prefix)
    c = connect(url, socket_timeout=30)
    await VectorIndex(c, f"{prefix}-idx", 384, keys).ensure()
    g = GraphStore(c, keys)
    rng = np.random.default_rng(0)
    res: dict[str, list[float]] = {"one": [], "tx": []}
    for r in range(8):
        for mode in ("one", "tx") if r % 2 == 0 else ("tx", "one"):
            convs = [
                Conv(f"ab{r}{mode}t{t}", f"c{k}", t * 5 + k) for t in range(4) for k in range(5)
            ]
            nodes = [
                episode_node(t)
                for t in _turns(convs, 256, datetime(2024, 3, 1, tzinfo=UTC).timestamp())
            ]
            for n in nodes:
                v = rng.standard_normal(384).astype(np.float32)
                n.vector = (v / np.linalg.norm(v)).tolist()
            t0 = time.perf_counter()
            if mode == "one":
                for n in nodes:
                    await g.append_episode(n)
            else:
                await g.append_episodes(nodes)
            res[mode].append(time.perf_counter() - t0)
    for k, v in res.items():
        print(k, "median ms", round(statistics.median(v) * 1000, 1), [round(x * 1000) for x in v])
    await c.aclose()


if __name__ == "__main__":
    with servers(None, None, need_kafka=False) as (url, _):
        asyncio.run(main(url))
