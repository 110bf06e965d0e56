"""An outbox for events that announce writes: stored in the same transaction as the data, kept
until the consumer has handled them, sent again when they linger.

Extraction writes a chunk's facts and its ``FactsExtracted`` event together; the runtime
publishes the event after the batch. A worker killed between the two would leave the chunk
written and never reflected (its episodes, redelivered, are already extracted), so the event
waits in ``state:{t}:outbox:<name>`` (and the tenant's ``outbox-index`` by time) until reflect
has handled it; the extract service re-sends entries older than ``GAAMA_OUTBOX_RESEND_S``.
Re-sending is harmless: reflection is idempotent per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from gaama.store.errors import store_errors
from gaama.store.keys import Keys


class Outbox:
    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    def _entry(self, tenant: str, name: str) -> str:
        return self.keys.state(tenant, "outbox", name)

    def _index(self, tenant: str) -> str:
        return self.keys.state(tenant, "outbox-index")

    @property
    def _tenants(self) -> str:
        # Not a tenant's key: which tenants have entries, for the re-send timer.
        return f"{self.keys.prefix}:outbox-tenants"

    def add_ops(self, tenant: str, name: str, payload: bytes, now: float) -> Callable[[Any], None]:
        """Commands that put an entry in the outbox, for the caller's MULTI/EXEC."""

        def ops(pipe: Any) -> None:
            pipe.set(self._entry(tenant, name), payload)
            pipe.zadd(self._index(tenant), {name: now})

        return ops

    async def announce(self, tenant: str) -> None:
        """Note that ``tenant`` has entries (outside the tenant's transaction: another slot)."""
        with store_errors():
            await self.redis.sadd(self._tenants, tenant)

    async def done(self, tenant: str, name: str) -> None:
        """The consumer handled the entry's event."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self._entry(tenant, name))
        pipe.zrem(self._index(tenant), name)
        with store_errors():
            await pipe.execute()

    async def pending(self, tenant: str) -> int:
        """Entries of ``tenant`` not handled yet."""
        with store_errors():
            return int(await self.redis.zcard(self._index(tenant)))

    async def stale(self, older_than: float, limit: int = 100) -> list[tuple[str, str, bytes]]:
        """``(tenant, name, payload)`` of entries written before ``older_than``."""
        out: list[tuple[str, str, bytes]] = []
        with store_errors():
            for raw in await self.redis.smembers(self._tenants):
                tenant = raw.decode() if isinstance(raw, bytes) else str(raw)
                names = await self.redis.zrangebyscore(
                    self._index(tenant), "-inf", older_than, start=0, num=limit
                )
                if not names and not await self.redis.zcard(self._index(tenant)):
                    await self.redis.srem(self._tenants, tenant)
                for n in names:
                    name = n.decode() if isinstance(n, bytes) else str(n)
                    payload = await self.redis.get(self._entry(tenant, name))
                    if payload is None:  # handled meanwhile
                        await self.redis.zrem(self._index(tenant), name)
                        continue
                    out.append(
                        (tenant, name, payload if isinstance(payload, bytes) else payload.encode())
                    )
        return out[:limit]

    async def touch(self, tenant: str, name: str, now: float) -> None:
        """An entry was sent again: wait a full period before the next time."""
        with store_errors():
            await self.redis.zadd(self._index(tenant), {name: now}, xx=True)
