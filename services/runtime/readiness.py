"""Health of a service's dependencies, read-only, and the background task that keeps the vector
index in place.

A probe never writes: ``/readyz`` says whether the pod itself serves, ``/healthz`` adds which
dependency is down (``degraded``). The index is created at start-up; when Redis is down then, or
loses the index later (a restart without persistence), :class:`IndexKeeper` creates it again in
the background, and the Query Engine indexes the node hashes again as it rebuilds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from redisvl.exceptions import RedisSearchError

from gaama.errors import GaamaError
from gaama.store.vectors import VectorIndex

log = logging.getLogger("gaama.runtime")

#: The longest one dependency check may take: every check of a probe runs at once, and the
#: probe must answer inside the manifests' ``timeoutSeconds``.
CHECK_TIMEOUT_S = 1.5

#: How often the keeper looks for the index.
INDEX_CHECK_S = 10.0

Check = Callable[[], Awaitable[str | None]]  # None when the dependency is up, else the reason


async def redis_state(redis: aioredis.Redis, index: VectorIndex) -> str | None:
    """None when Redis answers and the vector index exists; else the reason. Reads only."""
    ping: Callable[[], Awaitable[object]] = redis.ping
    try:
        await asyncio.wait_for(ping(), CHECK_TIMEOUT_S)
    except (RedisError, OSError, TimeoutError) as exc:
        return f"redis unreachable: {exc or type(exc).__name__}"
    try:
        exists = await asyncio.wait_for(index.ready(), CHECK_TIMEOUT_S)
    except (RedisError, RedisSearchError, OSError, TimeoutError) as exc:
        return f"redis unreachable: {exc or type(exc).__name__}"
    return None if exists else f"vector index {index.name!r} is missing (being recreated)"


async def dependency_states(checks: Mapping[str, Check]) -> dict[str, str]:
    """Each dependency's state, ``"ok"`` or the reason it is down, all checked at once."""

    async def one(check: Check) -> str:
        try:
            reason = await asyncio.wait_for(check(), CHECK_TIMEOUT_S + 0.5)
        except TimeoutError:
            reason = f"no answer within {CHECK_TIMEOUT_S + 0.5:g}s"
        return "ok" if reason is None else reason

    names = list(checks)
    states = await asyncio.gather(*(one(checks[n]) for n in names))
    return dict(zip(names, states, strict=True))


class IndexKeeper:
    """Creates the vector index whenever it is missing, every :data:`INDEX_CHECK_S`, until
    stopped. Redis being down is waited out quietly (the health page says so)."""

    def __init__(self, index: VectorIndex, interval_s: float = INDEX_CHECK_S) -> None:
        self.index = index
        self.interval_s = interval_s

    async def tick(self) -> bool:
        """One look: True when the index exists now (created if it was missing)."""
        try:
            if await self.index.ready():
                return True
            await asyncio.wait_for(self.index.ensure(), CHECK_TIMEOUT_S * 10)
        except (GaamaError, RedisError, RedisSearchError, OSError, TimeoutError) as exc:
            # Redis down (redisvl wraps its errors in its own): the next look tries again.
            log.debug("vector index %r not ensured yet: %s", self.index.name, exc)
            return False
        log.warning("vector index %r was missing (Redis restarted?); created it", self.index.name)
        return True

    async def run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.interval_s)
