"""Redis storage: graph (nodes, adjacency, chains), vector index, open chunks."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis


def connect(url: str, **options: Any) -> aioredis.Redis:
    """An async Redis client for GAAMA's stores.

    RESP2 is asked for explicitly: redis-py 8 negotiates RESP3 by default, which parses the
    search path's replies (FT.SEARCH results, nested script arrays) more slowly on this
    project's queries, and RedisVL's result processing expects RESP2 shapes.
    """
    return aioredis.Redis.from_url(url, protocol=2, **options)
