"""The close lock of an open chunk (redis-py's Lock): one holder at a time, extended by its
holder, lost when it expires, released only by its holder."""

from __future__ import annotations

import asyncio

import pytest

from gaama.store.chunks import ChunkStore

pytestmark = pytest.mark.requires_stack


async def test_one_holder_extends_and_releases(redis_client, keys) -> None:
    chunks = ChunkStore(redis_client, keys)
    held = await chunks.lock("acme", "c1", 5)
    assert held is not None
    assert await chunks.lock("acme", "c1", 5) is None  # taken
    assert await chunks.lock("acme", "c2", 5) is not None  # another conversation's
    assert await chunks.extend(held, 5)
    await chunks.unlock("acme", "c1", held)
    again = await chunks.lock("acme", "c1", 5)
    assert again is not None
    await chunks.unlock("acme", "c1", again)


async def test_an_expired_lock_is_lost_and_its_release_is_harmless(redis_client, keys) -> None:
    chunks = ChunkStore(redis_client, keys)
    stale = await chunks.lock("acme", "c1", 0.05)
    assert stale is not None
    await asyncio.sleep(0.1)
    other = await chunks.lock("acme", "c1", 5)  # expired: another worker takes it
    assert other is not None
    assert not await chunks.extend(stale, 5)
    await chunks.unlock("acme", "c1", stale)  # does not release the other worker's lock
    assert await chunks.lock("acme", "c1", 5) is None
    await chunks.unlock("acme", "c1", other)
