"""The open extraction chunk of each conversation, kept in Redis so it survives a crash.

Layout (see keys.py): a list of episode ids and a hash {words, updated} per conversation, and a
per-tenant sorted set of conversations with an open chunk (by last update) for the idle timer.

Appends are idempotent (Lua: an episode already in the chunk, or already extracted, is ignored).
Closing trims only the episodes that were extracted — in the same MULTI/EXEC as the graph writes —
so an episode appended meanwhile stays for the next chunk. A lock (redis-py's :class:`Lock`: SET NX
PX with a random token) lets one worker at a time close a given conversation's chunk; it expires
if that worker dies, and the holder extends it before each further attempt.

Every Redis call runs inside :func:`~gaama.store.errors.store_errors`: an outage reaches the
caller as ``StoreUnavailable`` (retried by the runtime), never as a raw redis-py error.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.lock import Lock
from redis.exceptions import LockError, LockNotOwnedError

from gaama.store import scripts
from gaama.store.errors import store_errors
from gaama.store.keys import Keys


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class AppendResult:
    added: bool
    episodes: int  # episodes in the open chunk after the append
    words: int
    already_extracted: bool = False
    overflow: bool = False  # not appended: the open chunk is too full for it


class ChunkStore:
    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._append = scripts.register(redis, "chunk_append.lua")

    def _k(self, tenant: str, conversation: str) -> tuple[str, str]:
        return (
            self.keys.state(tenant, "chunk", conversation),
            self.keys.state(tenant, "chunkmeta", conversation),
        )

    def _open(self, tenant: str) -> str:
        return self.keys.state(tenant, "open-chunks")

    @property
    def _tenants(self) -> str:
        return f"{self.keys.prefix}:open-chunk-tenants"

    async def append(
        self,
        tenant: str,
        conversation: str,
        episode_id: str,
        words: int,
        now: float,
        limit: int = 0,
    ) -> AppendResult:
        """Add an episode to the open chunk (one round trip). With a word ``limit``, an
        episode that would take a non-empty chunk over it is not added (``overflow``)."""
        lst, meta = self._k(tenant, conversation)
        with store_errors():
            n, w = await self._append(
                keys=[lst, meta, self.keys.node(tenant, episode_id), self._open(tenant)],
                args=[episode_id, words, repr(now), conversation, limit],
            )
            if n in (1, -2):
                # A cross-tenant hint for the idle timer, set when a chunk opens (outside the
                # script: it lives in no tenant's cluster slot), and again for a redelivered
                # episode (Redis may have lost the hint but not the append). Stale entries are
                # pruned by idle(), which puts back a tenant whose chunk opened meanwhile.
                await self.redis.sadd(self._tenants, tenant)
        if n == -1:
            return AppendResult(False, 0, 0, already_extracted=True)
        if n == -3:
            return AppendResult(False, 0, int(w), overflow=True)
        if n == -2:
            return AppendResult(False, *(await self.size(tenant, conversation)))
        return AppendResult(True, int(n), int(w))

    async def size(self, tenant: str, conversation: str) -> tuple[int, int]:
        lst, meta = self._k(tenant, conversation)
        pipe = self.redis.pipeline(transaction=False)
        pipe.llen(lst)
        pipe.hget(meta, "words")
        with store_errors():
            n, w = await pipe.execute()
        return int(n), int(w or 0)

    async def episodes(self, tenant: str, conversation: str) -> list[str]:
        lst, _ = self._k(tenant, conversation)
        with store_errors():
            return [_s(i) for i in await self.redis.lrange(lst, 0, -1)]

    def close_ops(
        self,
        tenant: str,
        conversation: str,
        n_episodes: int,
        words: int,
        chunk_id: str,
        episode_ids: list[str],
    ) -> Any:
        """Commands that remove the first ``n_episodes`` from the open chunk and mark them
        extracted; queued by the caller into the MULTI/EXEC that writes the graph."""
        lst, meta = self._k(tenant, conversation)

        def ops(pipe: Any) -> None:
            pipe.ltrim(lst, n_episodes, -1)
            pipe.hincrby(meta, "words", -words)
            for eid in episode_ids:
                pipe.hset(self.keys.node(tenant, eid), "chunk", chunk_id)

        return ops

    async def forget_if_empty(self, tenant: str, conversation: str) -> None:
        lst, meta = self._k(tenant, conversation)
        with store_errors():
            if await self.redis.llen(lst) == 0:
                pipe = self.redis.pipeline(transaction=True)
                pipe.delete(meta)
                pipe.zrem(self._open(tenant), conversation)
                await pipe.execute()

    async def idle(self, older_than: float, limit: int = 100) -> list[tuple[str, str]]:
        """(tenant, conversation) pairs whose open chunk was last touched before ``older_than``."""
        out: list[tuple[str, str]] = []
        with store_errors():
            for t in await self.redis.smembers(self._tenants):
                tenant = _s(t)
                convs = await self.redis.zrangebyscore(
                    self._open(tenant), "-inf", older_than, start=0, num=limit
                )
                if not convs and not await self.redis.zcard(self._open(tenant)):
                    await self.redis.srem(self._tenants, tenant)
                    # A chunk may have opened between the count and the removal; its append
                    # added the hint only once (the ZADD before the SADD), so look again.
                    if await self.redis.zcard(self._open(tenant)):
                        await self.redis.sadd(self._tenants, tenant)
                out += [(tenant, _s(c)) for c in convs]
        return out[:limit]

    async def lock(self, tenant: str, conversation: str, ttl_s: float) -> Lock | None:
        """The close lock of a conversation's chunk for ``ttl_s`` seconds, or None when another
        worker holds it."""
        lock = self.redis.lock(
            self.keys.state(tenant, "chunklock", conversation),
            timeout=ttl_s,
            blocking=False,
            thread_local=False,
        )
        with store_errors():
            return lock if await lock.acquire() else None

    async def extend(self, lock: Lock, ttl_s: float) -> bool:
        """Hold ``lock`` for another ``ttl_s`` seconds from now; False when it was lost (it
        expired, and maybe another worker holds it now)."""
        with store_errors():
            try:
                return bool(await lock.extend(ttl_s, replace_ttl=True))
            except LockError:
                return False

    async def unlock(self, tenant: str, conversation: str, lock: Lock) -> None:
        """Release ``lock`` if this worker still holds it (``tenant`` and ``conversation`` name
        the chunk, for the callers' symmetry with :meth:`lock`)."""
        with store_errors(), contextlib.suppress(LockNotOwnedError):
            await lock.release()  # not owned: it expired (and maybe another worker holds it)

    async def open_conversations(self, tenant: str) -> list[str]:
        """Conversations of ``tenant`` with an open chunk."""
        with store_errors():
            return [_s(c) for c in await self.redis.zrange(self._open(tenant), 0, -1)]

    async def remove(
        self, tenant: str, conversation: str, episode_ids: list[str], words: int
    ) -> None:
        """Take forgotten episodes out of the open chunk (the caller holds its lock)."""
        lst, meta = self._k(tenant, conversation)
        pipe = self.redis.pipeline(transaction=True)
        for eid in episode_ids:
            pipe.lrem(lst, 0, eid)
        pipe.hincrby(meta, "words", -words)
        with store_errors():
            await pipe.execute()
        await self.forget_if_empty(tenant, conversation)
