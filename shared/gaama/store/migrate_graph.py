"""``gaama migrate graph``: bring adjacency and NEXT chains written by an earlier version to this
version's compact forms. Every reader accepts the earlier forms, so this only gives memory back;
it can run while the services run, and again at any time (what is already compact is left
alone).

- **Adjacency values** as the edge kind's letter and the weight when not 1
  (:func:`gaama.store.codecs.adjacency_values`) instead of ``KIND|o|w``: each hash is read, and
  a value is replaced only if it is still the one read (``replace_if.lua``), so a concurrent
  write or forget wins.
- **NEXT chains** rewritten as listpacks where the server's ``zset-max-listpack-entries``
  allows (a sorted set made under a lower setting stays a skiplist until rewritten): one
  script call per chain, atomic.

Episodes' ``raw`` fields that the text holds are left in place: removing a field of an indexed
hash makes the Query Engine index the node again, vector included, for a few dozen bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gaama.store import cluster, scripts
from gaama.store.codecs import adjacency_value, as_text, parse_adjacency
from gaama.store.errors import store_errors
from gaama.store.keys import Keys

Progress = Callable[[str], None]
#: Keys handled at once (each one script call).
_IN_FLIGHT = 64


@dataclass
class GraphMigrationReport:
    adjacency_keys: int = 0
    values_rewritten: int = 0
    chains: int = 0
    chains_rewritten: int = 0


async def migrate_graph(
    redis: aioredis.Redis, keys: Keys, progress: Progress | None = None
) -> GraphMigrationReport:
    """Rewrite every adjacency value and NEXT chain under ``keys``' prefix, of every tenant, in
    this version's compact form (see the module docstring)."""
    report = GraphMigrationReport()
    replace = scripts.register(redis, "replace_if.lua")
    relist = scripts.register(redis, "relist_chain.lua")
    limit = await _listpack_limit(redis)

    async def adjacency(key: bytes) -> None:
        with store_errors():
            flat = await redis.hgetall(key)
            args: list[Any] = []
            for field, value in flat.items():
                if b"|" in value:  # the layout before the letters
                    nb = parse_adjacency(value, "")
                    args += [field, value, adjacency_value(nb.kind, nb.outgoing, nb.weight)]
            replaced = int(await replace(keys=[key], args=args)) if args else 0
        report.values_rewritten += replaced  # after the await: other keys' calls ran meanwhile
        report.adjacency_keys += 1

    async def chain(key: bytes) -> None:
        with store_errors():
            rewritten = int(await relist(keys=[key], args=[limit]))
        report.chains_rewritten += rewritten
        report.chains += 1

    for pattern, each in ((f"{keys.prefix}:adj:*", adjacency), (f"{keys.prefix}:chain:*", chain)):
        pending: set[asyncio.Task[None]] = set()
        with store_errors():
            async for key in cluster.scan_keys(redis, pattern):
                if len(pending) >= _IN_FLIGHT:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for t in done:
                        t.result()
                pending.add(asyncio.create_task(each(key)))
        await asyncio.gather(*pending)
        if progress:
            progress(
                f"{pattern}: adjacency {report.adjacency_keys} keys, {report.values_rewritten} "
                f"values rewritten; chains {report.chains}, {report.chains_rewritten} rewritten"
            )
    return report


async def _listpack_limit(redis: aioredis.Redis) -> int:
    """The server's ``zset-max-listpack-entries`` (the smallest over a cluster's primaries);
    0 (no chain rewritten) where CONFIG is not allowed, as on some managed services."""
    try:
        with store_errors():
            if cluster.is_cluster(redis):
                await cluster.initialized(redis)
                found = []
                for node in cluster.primaries(redis):
                    (reply,) = await cluster.on_node(
                        node, ["CONFIG", "GET", "zset-max-listpack-entries"]
                    )
                    if isinstance(reply, ResponseError):
                        raise reply
                    found.append(int(reply[1]))
                return min(found)
            got = await redis.config_get("zset-max-listpack-entries")
            return int(as_text(got.get("zset-max-listpack-entries")) or 0)
    except ResponseError:
        return 0
