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
    events = turns("acme", "c1", lines, eos=False)
    stored = []
    for t in events:
        from gaama.episodes import episode_node, episode_stored

        [v] = await embedder.embed([t.episode_text()])
        node = episode_node(t, v.tolist())
        await graph.append_episode(node)
        stored.append(episode_stored(t, node))
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
