"""The close lock of an open chunk (redis-py's Lock): one holder at a time, extended by its
holder, lost when it expires, released only by its holder."""

from __future__ import annotations

import asyncio

import pytest

from gaama.ids import chunk_id
from gaama.store.chunks import ChunkStore

pytestmark = pytest.mark.requires_stack


async def _stored(graph, embedder, events):
    from gaama.episodes import episode_node, episode_stored

    out = []
    for t in events:
        [v] = await embedder.embed([t.episode_text()])
        node = episode_node(t, v.tolist())
        await graph.append_episode(node)
        out.append(episode_stored(t, node))
    return out


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


async def test_a_chunk_is_never_overfilled_while_its_close_is_held(
    settings, graph, index, embedder
) -> None:
    """A dead worker's lock used to let appends run past the word budget (one chunk grew to
    7,197 words), moving every later boundary. Now the record is retried instead, and goes in
    once the chunk could be closed: boundaries depend only on the turns."""
    from gaama.errors import RetryableError
    from tests.component.test_forget_cascade import turns
    from tests.support.stream import Stream

    s = settings.model_copy(update={"chunk_words": 20})
    stream = Stream(s, graph, index, embedder)
    lines = [("Ann", "one two three four five six seven eight nine ten")] * 3
    stored = await _stored(graph, embedder, turns("acme", "c1", lines, eos=False))
    assert await stream.extract.on_episode(stored[0]) == []
    assert len(await stream.extract.on_episode(stored[1])) == 1  # 20 words: full, closed
    assert await stream.chunks.size("acme", "c1") == (0, 0)
    dead = await stream.chunks.lock("acme", "c1", 30)  # a worker holds the close and dies
    assert dead is not None
    third = stored[2].model_copy(update={"raw_text": " ".join(["word"] * 15)})
    assert await stream.extract.on_episode(third) == []  # 15 words: fits, appended
    fourth = stored[2].model_copy(
        update={"episode_id": stored[2].episode_id[:-1] + "x", "raw_text": "ten more words " * 3}
    )
    with pytest.raises(RetryableError, match="being closed elsewhere"):
        await stream.extract.on_episode(fourth)  # 9 more would overfill: retried, not appended
    assert (await stream.chunks.size("acme", "c1"))[0] == 1


async def test_a_long_close_keeps_its_lease(settings, graph, index, embedder) -> None:
    """The lease is short (a dead worker frees the chunk soon) but renewed while a close runs,
    however long the extractor takes: nobody else closes the chunk meanwhile."""
    from tests.component.test_forget_cascade import C1, as_records, turns
    from tests.support.stream import Stream

    s = settings.model_copy(update={"chunk_lock_s": 0.3})
    stream = Stream(s, graph, index, embedder)
    await stream.run(as_records(turns("acme", "c1", C1, eos=False)))
    real = stream.extract.d.extractor.extract
    seen: list[object] = []

    async def slow(chunk, context):
        await asyncio.sleep(1.0)  # over three leases
        seen.append(await stream.chunks.lock("acme", "c1", 5))  # another worker tries
        return await real(chunk, context)

    stream.extract.d.extractor.extract = slow  # type: ignore[method-assign]
    assert await stream.extract.close("acme", "c1", "idle") is not None
    assert seen == [None]


async def test_every_close_ends_however_its_lease_renewal_meets_the_end(
    settings, graph, index, embedder
) -> None:
    """A close ends its lease's renewal when it ends, wherever the renewal is: asleep, or in
    the middle of extending the lock. The stores' client has a socket timeout (as the services'
    has), under which redis-py on Python 3.11 loses a cancellation that arrives as its socket
    write completes; a renewal cancelled there used to carry on renewing the lock for ever, and
    the close waited for it: the extract consumer stopped for good with no error (chaos runs).
    Many short closes against a 30 ms lease put the end of a close at every point of the
    renewal, with the event loop now and then busy as it is in a working service."""
    import random
    import time

    from gaama.store import connect
    from gaama.store.graph import GraphStore
    from tests.support.stream import Stream

    client = connect(settings.redis_url, cluster=settings.redis_cluster, socket_timeout=10)
    s = settings.model_copy(update={"chunk_lock_s": 0.03})
    stream = Stream(s, GraphStore(client, graph.keys), index, embedder)
    read = stream.chunks.episodes
    rng = random.Random(16)

    async def episodes(tenant: str, conversation: str) -> list[str]:
        await asyncio.sleep(rng.random() * 0.03)  # the close's work: up to one lease long
        return await read(tenant, conversation)

    stream.chunks.episodes = episodes  # type: ignore[method-assign]

    async def busy_loop() -> None:  # CPU work on the loop (embedding, parsing) in bursts
        while True:
            await asyncio.sleep(rng.random() * 0.01)
            until = time.perf_counter() + rng.random() * 0.01
            while time.perf_counter() < until:
                pass

    busy = asyncio.ensure_future(busy_loop())
    stuck: set[asyncio.Future[object]] = set()
    try:
        for _ in range(50):
            closes = {
                asyncio.ensure_future(stream.extract.close("acme", f"c{i}", "idle"))
                for i in range(20)
            }
            _, stuck = await asyncio.wait(closes, timeout=10)
            if stuck:
                break
    finally:
        busy.cancel()
        for _ in range(100):  # a renewal that swallowed its cancel takes another one later
            if all(t.done() for t in stuck):
                break
            for t in stuck:
                t.cancel()
            await asyncio.sleep(0.05)
        await client.aclose()
    assert not stuck, f"{len(stuck)} of 20 closes never ended (their lease renewal kept going)"


async def test_an_end_of_session_close_that_finds_the_chunk_held_is_retried_not_passed_over(
    settings, graph, index, embedder
) -> None:
    """The chaos run's Redis kill -9: closes in flight could not release their locks, the AOF
    brought the locks back, and the redelivered end-of-session turns found their chunks
    "being closed elsewhere" and passed over the close. The next session's turns then joined
    those chunks (up to the word budget): boundaries moved in 9 conversations. The record is
    now retried until the close can run."""
    from gaama.errors import ChunkBusy
    from tests.component.test_forget_cascade import C1, turns
    from tests.support.stream import Stream

    stream = Stream(settings, graph, index, embedder)
    stored = await _stored(graph, embedder, turns("acme", "c1", C1))  # the last ends a session
    for ev in stored[:-1]:
        assert await stream.extract.on_episode(ev) == []
    held = await stream.chunks.lock("acme", "c1", 30)  # a close whose release never happened
    assert held is not None
    with pytest.raises(ChunkBusy):
        await stream.extract.on_episode(stored[-1])
    assert (await stream.chunks.size("acme", "c1"))[0] == len(C1)  # appended, still open
    await stream.chunks.unlock("acme", "c1", held)  # its lease lapses
    [done] = await stream.extract.on_episode(stored[-1])  # the retry closes the session
    assert done.chunk_id == chunk_id("acme", "c1", stored[0].episode_id, stored[-1].episode_id)
    assert await stream.chunks.size("acme", "c1") == (0, 0)


async def test_a_lock_whose_release_met_an_outage_is_released_by_the_next_close(
    settings, graph, index, embedder
) -> None:
    """A close that could not release its lock (Redis down at that moment) releases it at its
    next close of the chunk, instead of waiting GAAMA_CHUNK_LOCK_S for its own lease."""
    from gaama.errors import StoreUnavailable
    from tests.component.test_forget_cascade import C1, C2, turns
    from tests.support.stream import Stream

    stream = Stream(settings, graph, index, embedder)
    first = await _stored(graph, embedder, turns("acme", "c1", C1, eos=False))
    for ev in first:
        await stream.extract.on_episode(ev)
    unlock = stream.chunks.unlock
    failed: list[str] = []

    async def unlock_during_an_outage(tenant: str, conversation: str, lock) -> None:
        if not failed:
            failed.append(conversation)
            raise StoreUnavailable("Redis unavailable: ConnectionError")
        await unlock(tenant, conversation, lock)

    stream.chunks.unlock = unlock_during_an_outage  # type: ignore[method-assign]
    assert await stream.extract.close("acme", "c1", "idle") is not None
    assert failed == ["c1"]
    assert await stream.chunks.lock("acme", "c1", 5) is None  # still held by that close
    second = await _stored(graph, embedder, turns("acme", "c1", C2, first=len(C1)))
    for ev in second[:-1]:
        assert await stream.extract.on_episode(ev) == []
    [done] = await stream.extract.on_episode(second[-1])  # no ChunkBusy: released first
    assert done.chunk_id == chunk_id("acme", "c1", second[0].episode_id, second[-1].episode_id)
