"""Readiness checks shared by every service: Redis answers, the vector index exists, the broker
answers. A missing index is recreated here, so a service becomes ready again by itself after
Redis restarts without persistence (the index's documents are the node hashes, which the Query
Engine indexes again as it rebuilds)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gaama.errors import GaamaError
from gaama.store.vectors import VectorIndex

log = logging.getLogger("gaama.runtime")

READY_TIMEOUT_S = 2.0


async def stores_ready(redis: aioredis.Redis, index: VectorIndex) -> str | None:
    """None when Redis answers and the vector index exists (created when missing); else the
    reason."""
    ping: Callable[[], Awaitable[object]] = redis.ping
    try:
        await asyncio.wait_for(ping(), READY_TIMEOUT_S)
    except (RedisError, OSError, TimeoutError) as exc:
        return f"redis unreachable: {exc or type(exc).__name__}"
    if await index.ready():
        return None
    try:
        await asyncio.wait_for(index.ensure(), READY_TIMEOUT_S * 5)
    except (GaamaError, RedisError, OSError, TimeoutError) as exc:
        return f"vector index {index.name!r} is missing and could not be created: {exc}"
    log.warning("vector index %r was missing (Redis restarted?); recreated it", index.name)
    return None if await index.ready() else f"vector index {index.name!r} is missing"
