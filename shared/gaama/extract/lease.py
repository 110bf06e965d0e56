"""The close lock of a conversation's open chunk, held by one close at a time.

The lease is short, so a chunk whose worker died is free again within GAAMA_CHUNK_LOCK_S, and
renewed every third of it while the close runs, however long the extractor takes. A lock
whose release met a Redis outage (or a restart from the AOF, which brings the lock back) is
released by this worker's next close of the chunk, instead of holding that close off until
the lease lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gaama.errors import ChunkBusy, StoreUnavailable
from gaama.store.chunks import ChunkStore


class CloseLeases:
    def __init__(self, chunks: ChunkStore, ttl_s: float) -> None:
        self.chunks = chunks
        self.ttl_s = ttl_s
        # Locks whose release met an outage, by (tenant, conversation).
        self._unreleased: dict[tuple[str, str], Any] = {}

    @contextlib.asynccontextmanager
    async def held(self, tenant: str, conversation: str) -> AsyncIterator[Any]:
        """Hold the chunk's close lock for the block; ChunkBusy when another close holds it."""
        await self._release_left(tenant, conversation)
        token = await self.chunks.lock(tenant, conversation, self.ttl_s)
        if token is None:
            raise ChunkBusy(f"the chunk of {tenant}/{conversation} is being closed elsewhere")
        released = asyncio.Event()
        lease = asyncio.create_task(self._renew(token, released))
        try:
            yield token
        finally:
            # The renewal ends on the event; the cancel only cuts short a renewal in flight. A
            # cancel alone is not enough: on Python 3.11 redis-py loses a cancellation that
            # arrives just as its socket write completes (its asyncio.wait_for returns the
            # write's result instead, CPython gh-86296), and a renewal that misses its cancel
            # would renew the lock for ever while the close waits for it.
            released.set()
            lease.cancel()
            # asyncio.wait, not `await lease`: a cancellation of the close must not be
            # swallowed along with the lease's own.
            await asyncio.wait({lease})
            try:
                await self.chunks.unlock(tenant, conversation, token)
            except StoreUnavailable:
                self._unreleased[(tenant, conversation)] = token

    async def still_held(self, token: Any) -> bool:
        """Extend the lease now; False when it lapsed (another close may hold the chunk)."""
        return await self.chunks.extend(token, self.ttl_s)

    async def _release_left(self, tenant: str, conversation: str) -> None:
        left = self._unreleased.pop((tenant, conversation), None)
        if left is None:
            return
        try:
            await self.chunks.unlock(tenant, conversation, left)
        except StoreUnavailable:
            self._unreleased[(tenant, conversation)] = left
            raise

    async def _renew(self, token: Any, released: asyncio.Event) -> None:
        while not released.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ttl_s / 3):
                    await released.wait()
            if released.is_set():
                return
            try:
                if not await self.chunks.extend(token, self.ttl_s):
                    return  # lost: the write's WATCH and the trim keep a second close harmless
            except StoreUnavailable:
                continue  # an outage: the close itself will fail and be retried
