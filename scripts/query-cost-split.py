"""Where a search's CPU goes, outside the embedder: searches run one at a time in-process against
a synthetic tenant (``benchmarks.synthetic``, as ``python -m benchmarks query`` loads it) on a
Redis of its own, the query vectors encoded before the clock starts.

    PYTHONPATH=shared:. python scripts/query-cost-split.py [nodes] [searches]

For gaama and semantic, each with and without the lexical channel (``w_lex`` 0): the process's
user and system CPU per search and the wall time per search; Redis's CPU per search (``INFO
cpu``) and, from its SLOWLOG with every command logged, the time of each kind of command per
search. Last, the cost of packing one lexical ``INKEYS`` command of 100 keys with redis-py's
asyncio packer and with :class:`gaama.store.packing.PackedConnection`.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import time
import timeit
from typing import Any

from redis.asyncio.connection import Connection

from benchmarks import inprocess
from gaama.devstack import processes
from gaama.store.codecs import as_text
from gaama.store.packing import PackedConnection

VARIANTS: list[tuple[str, dict[str, Any] | None]] = [
    ("gaama", None),
    ("semantic", None),
    ("gaama", {"w_lex": 0.0}),
    ("semantic", {"w_lex": 0.0}),
]


def command_kind(args: list[str]) -> str:
    if args[0] == "EVALSHA":
        return f"script {args[1][:8]}"
    if args[0] != "FT.SEARCH":
        return args[0].lower()
    query = args[2]
    if "KNN" in query:
        return "FT.SEARCH knn"
    if "DISMAX" in args:
        return "FT.SEARCH term frequencies" + (" (INKEYS)" if "INKEYS" in args else "")
    if query == "*":
        return "FT.SEARCH candidates' texts (INKEYS)"
    if "SORTBY" in args:
        return "FT.SEARCH latest time"
    return "FT.SEARCH scope count"


async def split(url: str, nodes: int, searches: int) -> None:
    loaded = await inprocess.searches(url, "split", nodes, searches)
    client, retriever, tenant, texts = loaded.client, loaded.retriever, loaded.tenant, loaded.texts
    for text in texts[:20]:
        await retriever.search(tenant, text)
    await client.config_set("slowlog-max-len", 1_000_000)
    print(f"{nodes:,} nodes, {searches} searches per variant, one at a time")
    for mode, params in VARIANTS:
        await client.config_set("slowlog-log-slower-than", 0)
        await client.slowlog_reset()
        cpu0 = await client.info("cpu")
        usage0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for text in texts:
            await retriever.search(tenant, text, mode=mode, params=params)  # type: ignore[arg-type]
        wall = time.perf_counter() - wall0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu1 = await client.info("cpu")
        await client.config_set("slowlog-log-slower-than", 10_000)
        log = await client.execute_command("SLOWLOG", "GET", 1_000_000)
        per = 1000.0 / searches
        redis_cpu = sum(cpu1[f] - cpu0[f] for f in ("used_cpu_user", "used_cpu_sys")) * per
        lexical = "with" if params is None else "without"
        print(
            f"\n{mode} {lexical} the lexical channel: process user "
            f"{(usage.ru_utime - usage0.ru_utime) * per:.2f} ms + sys "
            f"{(usage.ru_stime - usage0.ru_stime) * per:.2f} ms per search, wall "
            f"{wall * per:.2f} ms; Redis CPU {redis_cpu:.2f} ms per search"
        )
        kinds: dict[str, list[int]] = {}
        for entry in log:
            args = [as_text(a) for a in entry[3]]
            if args[0] in ("CONFIG", "SLOWLOG", "INFO"):
                continue
            kinds.setdefault(command_kind(args), []).append(int(entry[2]))
        for kind, us in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
            print(
                f"  {kind:40s} {len(us) / searches:5.2f} per search, "
                f"{sum(us) / len(us):7.0f} us each, {sum(us) / searches / 1000:6.2f} ms per search"
            )
    await client.aclose()


def packing() -> None:
    keys = [f"gaama:{{tenant}}:node:f_{i:032x}" for i in range(100)]
    cmd = ("FT.SEARCH", "idx", "*", "INKEYS", 100, *keys, "RETURN", 1, "text", "DIALECT", 2)
    for name, conn in (("redis-py", Connection()), ("hiredis", PackedConnection())):
        seconds = min(timeit.repeat(lambda c=conn: c.pack_command(*cmd), number=2000, repeat=5))
        print(f"packing an INKEYS of 100 keys, {name}: {seconds / 2000 * 1e6:.1f} us")


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    searches = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    with processes.temporary_redis("gaama-split-") as url:
        asyncio.run(split(url, nodes, searches))
    packing()


if __name__ == "__main__":
    main()
